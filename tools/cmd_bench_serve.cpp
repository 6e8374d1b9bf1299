// kestrel bench serve: a load generator for any OpenAI-compatible server. It replays a workload of
// streaming /v1/completions requests with a fixed number in flight and reports output tokens/s, TTFT and
// TPOT percentiles, errors, and the server's prefix-cache hit rate when its /metrics exposes one.
//
// Workloads: shared-prefix (a common system prompt, or one of --prefixes N drawn at random, plus a short
// unique question per request) and unique
// (a distinct prompt per request). Prompts are token ids (exact lengths; accepted by kestrel, llama-server
// and vLLM), drawn from a seeded generator.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common.h"
#include "core/timer.h"

namespace kestrel::cli {
namespace {

using json = nlohmann::json;

struct ServeBenchArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string workload = "shared-prefix";
  std::string api_key, model = "kestrel", output = "md";
  int requests = 32, concurrency = 8;
  int prefix_tokens = 400, unique_tokens = 15, max_tokens = 64;
  int prefixes = 1;  // distinct system prompts (shared-prefix)
  int min_tokens = 0;  // > 0: each request generates a seeded-random count in [min_tokens, max_tokens]
  int vocab = 32000;
  uint64_t seed = 1;
  double long_share = 0;  // share of requests whose unique part is long_tokens long (a mixed workload)
  int long_tokens = 1024;
  double temperature = 0;
  std::string response_format;  // "" or "json_object": structured output (constrained decoding)
};

struct RequestResult {
  bool ok = false;
  std::string error;
  int n_tokens = 0;
  double ttft_s = 0, tpot_s = 0, latency_s = 0;
  std::vector<double> gaps_s;  // between consecutive chunks with text (inter-token latency)
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// The counter `name` from Prometheus text (first sample without labels), or -1.
double scrape(const std::string& metrics, const std::string& name) {
  size_t pos = 0;
  while ((pos = metrics.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || metrics[pos - 1] == '\n';
    const size_t after = pos + name.size();
    if (line_start && after < metrics.size() && metrics[after] == ' ') return std::atof(metrics.c_str() + after + 1);
    pos = after;
  }
  return -1;
}

RequestResult run_one(const std::string& url, const ServeBenchArgs& a, const std::vector<int32_t>& prompt,
                      int max_tokens) {
  RequestResult r;
  httplib::Client client(url);
  client.set_read_timeout(600, 0);
  client.set_connection_timeout(30, 0);
  json body = {{"model", a.model},          {"prompt", prompt},   {"max_tokens", max_tokens},
               {"temperature", a.temperature}, {"ignore_eos", true}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!a.response_format.empty()) body["response_format"] = {{"type", a.response_format}};
  if (a.temperature > 0) body["seed"] = static_cast<int64_t>(std::hash<std::string>()(json(prompt).dump()) % 1000000);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  if (!a.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + a.api_key);
  req.body = body.dump();
  const Timer timer;
  double first = -1, last = 0;
  int chunks_with_text = 0, usage_tokens = -1;
  std::string pending;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    pending.append(data, len);
    for (size_t nl; (nl = pending.find("\n\n")) != std::string::npos; pending.erase(0, nl + 2)) {
      const std::string event = pending.substr(0, nl);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("usage") && chunk["usage"].is_object()) usage_tokens = chunk["usage"].value("completion_tokens", -1);
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& c = chunk["choices"][0];
      if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
        const double now = timer.elapsed_s();
        if (first < 0) first = now;
        else r.gaps_s.push_back(now - last);
        last = now;
        ++chunks_with_text;
      }
    }
    return true;
  };
  auto res = client.send(req);
  r.latency_s = timer.elapsed_s();
  if (!res) {
    r.error = httplib::to_string(res.error());
    return r;
  }
  if (res->status != 200) {
    r.error = "HTTP " + std::to_string(res->status);
    return r;
  }
  r.n_tokens = usage_tokens >= 0 ? usage_tokens : chunks_with_text;
  r.ok = r.n_tokens > 0;
  r.ttft_s = first;
  r.tpot_s = r.n_tokens > 1 ? (last - first) / (r.n_tokens - 1) : 0;
  if (!r.ok) r.error = "no tokens";
  return r;
}

int run_bench_serve(const ServeBenchArgs& a) {
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> token(100, std::max(101, a.vocab - 1));
  const bool shared = a.workload == "shared-prefix";
  std::vector<std::vector<int32_t>> prefixes(shared ? static_cast<size_t>(a.prefixes) : 1);  // [prefixes][prefix_tokens]
  if (shared)
    for (auto& prefix : prefixes)
      for (int i = 0; i < a.prefix_tokens; ++i) prefix.push_back(token(rng));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> lengths;  // tokens to generate per request
  std::uniform_int_distribution<int> length(a.min_tokens > 0 ? std::min(a.min_tokens, a.max_tokens) : a.max_tokens, a.max_tokens);
  std::bernoulli_distribution long_prompt(std::clamp(a.long_share, 0.0, 1.0));
  for (int r = 0; r < a.requests; ++r) {
    std::vector<int32_t> p = prefixes[std::uniform_int_distribution<size_t>(0, prefixes.size() - 1)(rng)];
    const int n_unique = long_prompt(rng) ? a.long_tokens : a.unique_tokens;
    for (int i = 0; i < n_unique; ++i) p.push_back(token(rng));
    prompts.push_back(std::move(p));
    lengths.push_back(length(rng));
  }
  httplib::Client probe(a.url);
  httplib::Headers auth;
  if (!a.api_key.empty()) auth.emplace("Authorization", "Bearer " + a.api_key);
  auto metrics_before = probe.Get("/metrics", auth);
  const std::string before = metrics_before && metrics_before->status == 200 ? metrics_before->body : "";

  std::vector<RequestResult> results(prompts.size());
  std::atomic<size_t> next{0};
  const Timer wall;
  std::vector<std::thread> workers;
  for (int w = 0; w < a.concurrency; ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < prompts.size();) results[i] = run_one(a.url, a, prompts[i], lengths[i]);
    });
  for (auto& t : workers) t.join();
  const double elapsed = wall.elapsed_s();

  auto metrics_after = probe.Get("/metrics", auth);
  const std::string after = metrics_after && metrics_after->status == 200 ? metrics_after->body : "";
  double hit_rate = -1;
  const double hits = scrape(after, "kestrel_prefix_cache_hit_tokens_total") - scrape(before, "kestrel_prefix_cache_hit_tokens_total");
  const double prompt_tokens = scrape(after, "kestrel_prompt_tokens_total") - scrape(before, "kestrel_prompt_tokens_total");
  if (!before.empty() && !after.empty() && prompt_tokens > 0) hit_rate = hits / prompt_tokens;
  const double kv_unused_at_peak = scrape(after, "kestrel_kv_peak_unused_fraction");
  const double peak_running = scrape(after, "kestrel_requests_running_peak");  // kestrel: KV capacity in use
  const double preemptions = scrape(after, "kestrel_preemptions_total") - scrape(before, "kestrel_preemptions_total");
  // Speculative decoding on the server (kestrel's /metrics): drafts verified and accepted during this run.
  const auto delta = [&](const char* name) { return scrape(after, name) - scrape(before, name); };
  const bool speculative = scrape(after, "kestrel_spec_draft_tokens_total") >= 0 && !before.empty();
  const double drafted = speculative ? delta("kestrel_spec_draft_tokens_total") : 0;
  const double accepted = speculative ? delta("kestrel_spec_accepted_tokens_total") : 0;
  const double verify_steps = speculative ? delta("kestrel_spec_verify_steps_total") : 0;

  std::vector<double> ttft, tpot, gaps;
  int64_t tokens = 0;
  int errors = 0;
  std::string first_error;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      if (errors++ == 0) first_error = r.error;
      continue;
    }
    tokens += r.n_tokens;
    ttft.push_back(r.ttft_s);
    if (r.n_tokens > 1) tpot.push_back(r.tpot_s);
    gaps.insert(gaps.end(), r.gaps_s.begin(), r.gaps_s.end());
  }
  const json report = {{"workload", a.workload}, {"requests", a.requests}, {"concurrency", a.concurrency},
                       {"prompt_tokens", shared ? a.prefix_tokens + a.unique_tokens : a.unique_tokens},
                       {"max_tokens", a.max_tokens}, {"errors", errors}, {"elapsed_s", elapsed},
                       {"output_tokens", tokens}, {"output_tok_s", static_cast<double>(tokens) / elapsed},
                       {"ttft_p50_s", percentile(ttft, 50)}, {"ttft_p99_s", percentile(ttft, 99)},
                       {"tpot_p50_ms", percentile(tpot, 50) * 1e3}, {"tpot_p99_ms", percentile(tpot, 99) * 1e3},
                       {"itl_p50_ms", percentile(gaps, 50) * 1e3}, {"itl_p99_ms", percentile(gaps, 99) * 1e3},
                       {"long_share", a.long_share}, {"long_tokens", a.long_tokens},
                       {"prefix_cache_hit_rate", hit_rate < 0 ? json(nullptr) : json(hit_rate)},
                       {"kv_unused_at_peak", kv_unused_at_peak < 0 ? json(nullptr) : json(kv_unused_at_peak)},
                       {"peak_running", peak_running < 0 ? json(nullptr) : json(peak_running)},
                       {"preemptions", peak_running < 0 || before.empty() ? json(nullptr) : json(preemptions)},
                       {"spec_acceptance", drafted > 0 ? json(accepted / drafted) : json(nullptr)},
                       {"spec_mean_accepted_length", verify_steps > 0 ? json(accepted / verify_steps + 1) : json(nullptr)}};
  if (a.output == "json") {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("| workload | requests | in flight | prompt | gen | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | "
                "ITL p99 | errors | prefix hits |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    std::printf("| %s | %d | %d | %d | %s | %.1f | %.2f s | %.2f s | %.0f ms | %.0f ms | %.0f ms | %d | %s |\n",
                (a.workload + (a.long_share > 0 ? ", " + std::to_string(static_cast<int>(a.long_share * 100 + 0.5)) + "% of " +
                                                      std::to_string(a.long_tokens) + " tokens" : "")).c_str(),
                a.requests, a.concurrency, report["prompt_tokens"].get<int>(),
                (a.min_tokens > 0 ? std::to_string(a.min_tokens) + "-" : std::string()).append(std::to_string(a.max_tokens)).c_str(),
                report["output_tok_s"].get<double>(), percentile(ttft, 50), percentile(ttft, 99),
                percentile(tpot, 50) * 1e3, percentile(tpot, 99) * 1e3, percentile(gaps, 99) * 1e3, errors,
                hit_rate < 0 ? "n/a" : (std::to_string(static_cast<int>(hit_rate * 100 + 0.5)) + "%").c_str());
    if (kv_unused_at_peak >= 0)
      std::printf("\nserver KV cache at its peak so far: %.1f%% of in-use positions unused\n", kv_unused_at_peak * 100);
    if (peak_running >= 0)
      std::printf("server ran at most %.0f sequences at once so far (%.0f preemptions in this run)\n", peak_running,
                  before.empty() ? 0.0 : preemptions);
    if (speculative)
      std::printf("speculative decoding: %.0f drafts verified, %.1f%% accepted, %.2f tokens per verification\n", drafted,
                  drafted > 0 ? 100 * accepted / drafted : 0.0, verify_steps > 0 ? accepted / verify_steps + 1 : 0.0);
  }
  if (errors) std::fprintf(stderr, "%d requests failed; first error: %s\n", errors, first_error.c_str());
  return errors == 0 ? 0 : 1;
}

}  // namespace

CLI::App* add_bench_serve(CLI::App& bench, Action& run) {
  auto a = std::make_shared<ServeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Load-test an OpenAI-compatible server (kestrel, llama-server, vLLM)");
  cmd->add_option("--url", a->url, "Server base URL")->capture_default_str();
  cmd->add_option("--workload", a->workload, "shared-prefix or unique")
      ->check(CLI::IsMember({"shared-prefix", "unique"}))->capture_default_str();
  cmd->add_option("--requests", a->requests, "Requests in total")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--concurrency", a->concurrency, "Requests in flight")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--prefix-tokens", a->prefix_tokens, "Shared system-prompt tokens (shared-prefix)")->capture_default_str();
  cmd->add_option("--prefixes", a->prefixes, "Distinct system prompts (shared-prefix), one drawn at random per request")
      ->check(CLI::Range(1, 10000))->capture_default_str();
  cmd->add_option("--unique-tokens", a->unique_tokens, "Unique prompt tokens per request")->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens generated per request (ignore_eos)")->capture_default_str();
  cmd->add_option("--min-tokens", a->min_tokens, "If set: requests generate a random count in [min, max] tokens");
  cmd->add_option("--long-share", a->long_share,
                  "Share of requests whose unique prompt part is --long-tokens long instead (a mixed workload)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--long-tokens", a->long_tokens, "Unique prompt tokens of the long requests")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--vocab", a->vocab, "Prompt token ids are drawn from [100, vocab)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the prompt generator")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy); sampled requests get seeds")
      ->check(CLI::Range(0.0, 2.0))->capture_default_str();
  cmd->add_option("--response-format", a->response_format,
                  "Ask for structured output: json_object (constrained decoding; requests may end before --max-tokens)")
      ->check(CLI::IsMember({"text", "json_object"}));
  cmd->add_option("--api-key", a->api_key, "Bearer key");
  cmd->add_option("--model", a->model, "Model name sent in requests")->capture_default_str();
  cmd->add_option("-o,--output", a->output, "md or json")->check(CLI::IsMember({"md", "json"}));
  cmd->callback([&run, a] { run = [a] { return run_bench_serve(*a); }; });
  return cmd;
}

}  // namespace kestrel::cli
