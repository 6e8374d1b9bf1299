#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace kestrel {
namespace {
std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}
}  // namespace

void Histogram::observe(double x) {
  size_t i = 0;
  while (i < bounds_.size() && x > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += x;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40}),
      tpot_({0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1}),
      latency_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}) {}

void Metrics::request_finished(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::request_timing(double ttft_s, double tpot_s, double latency_s, int32_t n_generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (n_generated > 0) ttft_.observe(ttft_s);
  if (n_generated > 1) tpot_.observe(tpot_s);
  latency_.observe(latency_s);
}

void Metrics::engine_stats(const EngineStats& stats, size_t replica) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (replicas_.size() <= replica) replicas_.resize(replica + 1);
  replicas_[replica] = stats;
}

void Metrics::set_router(const ReplicaRouter* router) {
  std::lock_guard<std::mutex> lock(mutex_);
  router_ = router;
}

namespace {
// The replicas' counters and gauges summed (the first one's for what they share: block size, parallelism).
EngineStats combined(const std::vector<EngineStats>& replicas) {
  if (replicas.empty()) return {};
  EngineStats s = replicas[0];
  for (size_t r = 1; r < replicas.size(); ++r) {
    const EngineStats& o = replicas[r];
    s.n_waiting += o.n_waiting;
    s.n_running += o.n_running;
    s.peak_running += o.peak_running;
    s.kv_blocks_total += o.kv_blocks_total;
    s.kv_blocks_used += o.kv_blocks_used;
    s.kv_blocks_cached += o.kv_blocks_cached;
    s.kv_blocks_free += o.kv_blocks_free;
    s.kv_tokens_used += o.kv_tokens_used;
    s.kv_bytes += o.kv_bytes;
    s.kv_peak_blocks_used += o.kv_peak_blocks_used;
    s.kv_peak_unused_tokens += o.kv_peak_unused_tokens;
    s.prompt_tokens += o.prompt_tokens;
    s.prompt_tokens_cached += o.prompt_tokens_cached;
    s.generated_tokens += o.generated_tokens;
    s.preemptions += o.preemptions;
    s.steps += o.steps;
    s.forward_seconds += o.forward_seconds;
    for (size_t e = 0; e < std::min(s.expert_tokens.size(), o.expert_tokens.size()); ++e) s.expert_tokens[e] += o.expert_tokens[e];
  }
  return s;
}
}  // namespace

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const EngineStats engine = combined(replicas_);
  std::string out;
  auto counter = [&](const std::string& name, const std::string& help, double value) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " + number(value) + "\n";
  };
  auto gauge = [&](const std::string& name, const std::string& help, double value) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + number(value) + "\n";
  };
  out += "# HELP kestrel_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE kestrel_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += "kestrel_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  counter("kestrel_prompt_tokens_total", "Prompt tokens of admitted requests.", static_cast<double>(engine.prompt_tokens));
  counter("kestrel_prefix_cache_hit_tokens_total", "Prompt tokens served by the prefix cache.",
          static_cast<double>(engine.prompt_tokens_cached));
  counter("kestrel_generation_tokens_total", "Tokens generated.", static_cast<double>(engine.generated_tokens));
  counter("kestrel_preemptions_total", "Sequences preempted (recomputed later) for lack of KV blocks.",
          static_cast<double>(engine.preemptions));
  counter("kestrel_engine_steps_total", "Forward passes run by the engine.", static_cast<double>(engine.steps));
  gauge("kestrel_requests_waiting", "Sequences waiting to be scheduled.", static_cast<double>(engine.n_waiting));
  gauge("kestrel_requests_running", "Sequences in the running batch.", static_cast<double>(engine.n_running));
  gauge("kestrel_requests_running_peak", "Most sequences in the running batch at once so far.",
        static_cast<double>(engine.peak_running));
  out += "# HELP kestrel_kv_blocks KV cache blocks by state.\n# TYPE kestrel_kv_blocks gauge\n";
  out += "kestrel_kv_blocks{state=\"used\"} " + std::to_string(engine.kv_blocks_used) + "\n";
  out += "kestrel_kv_blocks{state=\"cached\"} " + std::to_string(engine.kv_blocks_cached) + "\n";
  out += "kestrel_kv_blocks{state=\"free\"} " + std::to_string(engine.kv_blocks_free) + "\n";
  gauge("kestrel_kv_tokens_used", "Token positions filled in used KV blocks.", static_cast<double>(engine.kv_tokens_used));
  gauge("kestrel_kv_bytes_per_token", "KV cache bytes one token takes (all layers and KV heads).",
        static_cast<double>(engine.kv_bytes_per_token));
  gauge("kestrel_kv_bytes", "KV cache size in bytes.", static_cast<double>(engine.kv_bytes));
  gauge("kestrel_kv_peak_blocks_used", "Most KV blocks in use at once so far.", engine.kv_peak_blocks_used);
  gauge("kestrel_kv_peak_unused_fraction", "Share of the peak's in-use KV positions holding no token.",
        engine.kv_peak_blocks_used ? static_cast<double>(engine.kv_peak_unused_tokens) /
                                          (static_cast<double>(engine.kv_peak_blocks_used) * engine.kv_block_size)
                                    : 0.0);
  if (!engine.expert_tokens.empty()) {
    // Expert load: routed (token, expert) pairs per expert and, split over ranks, per expert-parallel rank.
    const int n_expert = static_cast<int>(engine.expert_tokens.size()), ep = engine.expert_parallel_ranks;
    out += "# HELP kestrel_expert_tokens_total (token, expert) pairs routed to each expert.\n"
           "# TYPE kestrel_expert_tokens_total counter\n";
    for (int e = 0; e < n_expert; ++e)
      out += "kestrel_expert_tokens_total{expert=\"" + std::to_string(e) + "\"} " +
             std::to_string(engine.expert_tokens[static_cast<size_t>(e)]) + "\n";
    out += "# HELP kestrel_expert_rank_tokens_total (token, expert) pairs routed to the experts each expert-parallel rank holds.\n"
           "# TYPE kestrel_expert_rank_tokens_total counter\n";
    for (int r = 0; r < ep; ++r) {
      const auto [begin, end] = expert_share(n_expert, ep, r);
      int64_t n = 0;
      for (int e = begin; e < end; ++e) n += engine.expert_tokens[static_cast<size_t>(e)];
      out += "kestrel_expert_rank_tokens_total{rank=\"" + std::to_string(r) + "\"} " + std::to_string(n) + "\n";
    }
  }
  if (engine.tensor_parallel_ranks > 1 || engine.pipeline_stages > 1 || engine.expert_parallel_ranks > 1 ||
      engine.context_parallel_ranks > 1) {
    gauge("kestrel_tensor_parallel_ranks", "Ranks each layer is split over (--tp).", engine.tensor_parallel_ranks);
    gauge("kestrel_pipeline_stages", "Stages the layers are split over (--pp).", engine.pipeline_stages);
    gauge("kestrel_expert_parallel_ranks", "Ranks the experts are split over (--ep).", engine.expert_parallel_ranks);
    gauge("kestrel_context_parallel_ranks", "Ranks long batches are split over by position (--cp).",
          engine.context_parallel_ranks);
    if (engine.pipeline_stages > 1)
      gauge("kestrel_pipeline_bubble_fraction",
            "Share of forward time the first pipeline stage spent waiting for the later ones (one batch in flight: "
            "about (stages - 1) / stages).",
            engine.forward_seconds > 0 ? engine.pipeline_wait_seconds / engine.forward_seconds : 0.0);
    counter("kestrel_dist_messages_total",
            "Messages rank 0 took part in (step plans relayed, all-reduces, logits gathers, activations between stages).",
            static_cast<double>(engine.comm.messages));
    counter("kestrel_dist_bytes_total", "Bytes rank 0 sent in them.", static_cast<double>(engine.comm.bytes));
    counter("kestrel_dist_seconds_total", "Wall time rank 0 spent inside them (waiting for the others included).",
            engine.comm.seconds);
  }
  if (const DisaggregationStats& pd = engine.disaggregation; pd.prefill_ranks > 0) {
    // Prefill/decode disaggregation: each role's time, the KV moved between them, each prefill rank's state.
    gauge("kestrel_pd_prefill_ranks", "Ranks that prefill prompts (--prefill-ranks); rank 0 decodes.", pd.prefill_ranks);
    gauge("kestrel_pd_group_ranks", "Ranks per role group (--tp): each prefill group and the decode group split the model "
          "over this many; per-group series are labelled with the group's first rank.", pd.group_size);
    out += "# HELP kestrel_pd_prefill_time_to_first_token_seconds Prefill role: from rank 0 sending a prompt to its "
           "logits and KV pages being on rank 0.\n# TYPE kestrel_pd_prefill_time_to_first_token_seconds summary\n"
           "kestrel_pd_prefill_time_to_first_token_seconds_sum " + number(pd.prefill_ttft_seconds) +
           "\nkestrel_pd_prefill_time_to_first_token_seconds_count " + std::to_string(pd.prompts) + "\n";
    counter("kestrel_pd_prefill_queue_seconds_total", "Prefill role: time prompts waited on their prefill rank.",
            pd.prefill_queue_seconds);
    counter("kestrel_pd_prefill_compute_seconds_total", "Prefill role: time from admission to logits on the prefill rank.",
            pd.prefill_compute_seconds);
    out += "# HELP kestrel_pd_decode_time_per_output_token_seconds Decode role: wall time of rank 0's steps that only "
           "decoded (one token per running sequence).\n# TYPE kestrel_pd_decode_time_per_output_token_seconds summary\n"
           "kestrel_pd_decode_time_per_output_token_seconds_sum " + number(engine.decode_step_seconds) +
           "\nkestrel_pd_decode_time_per_output_token_seconds_count " + std::to_string(engine.decode_steps) + "\n";
    counter("kestrel_pd_kv_transfer_pages_total", "KV pages received from prefill ranks.", static_cast<double>(pd.kv_pages));
    counter("kestrel_pd_kv_transfer_bytes_total", "KV bytes received from prefill ranks.", static_cast<double>(pd.kv_bytes));
    auto per_rank = [&](const std::string& name, const std::string& help, const char* type, auto value) {
      out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      for (size_t r = 0; r < pd.workers.size(); ++r)
        out += name + "{rank=\"" + std::to_string((r + 1) * static_cast<size_t>(pd.group_size)) + "\"} " +
               number(static_cast<double>(value(pd.workers[r]))) + "\n";
    };
    out += "# HELP kestrel_pd_prefill_kv_blocks A prefill rank's KV blocks by state.\n# TYPE kestrel_pd_prefill_kv_blocks gauge\n";
    for (size_t r = 0; r < pd.workers.size(); ++r) {
      const PrefillWorkerStats& w = pd.workers[r];
      const std::string rank = "rank=\"" + std::to_string((r + 1) * static_cast<size_t>(pd.group_size)) + "\"";
      out += "kestrel_pd_prefill_kv_blocks{" + rank + ",state=\"used\"} " + std::to_string(w.kv_blocks_used) + "\n";
      out += "kestrel_pd_prefill_kv_blocks{" + rank + ",state=\"cached\"} " + std::to_string(w.kv_blocks_cached) + "\n";
      out += "kestrel_pd_prefill_kv_blocks{" + rank + ",state=\"free\"} " +
             std::to_string(w.kv_blocks_total - w.kv_blocks_used - w.kv_blocks_cached) + "\n";
    }
    per_rank("kestrel_pd_prefill_requests_running", "Prompts a prefill rank is computing.", "gauge",
             [](const PrefillWorkerStats& w) { return w.n_running; });
    per_rank("kestrel_pd_prefill_requests_waiting", "Prompts waiting on a prefill rank.", "gauge",
             [](const PrefillWorkerStats& w) { return w.n_waiting; });
    per_rank("kestrel_pd_prefill_prompt_tokens_total", "Prompt tokens a prefill rank prefilled.", "counter",
             [](const PrefillWorkerStats& w) { return w.prompt_tokens; });
    per_rank("kestrel_pd_prefill_cache_hit_tokens_total", "Of which its prefix cache supplied.", "counter",
             [](const PrefillWorkerStats& w) { return w.prompt_tokens_cached; });
    per_rank("kestrel_pd_prefill_steps_total", "Forward passes a prefill rank ran.", "counter",
             [](const PrefillWorkerStats& w) { return w.steps; });
  }
  if (engine.speculative) {
    const SpecStats& sp = engine.spec;
    counter("kestrel_spec_verify_steps_total", "Speculative steps that verified drafts (per sequence).",
            static_cast<double>(sp.verify_steps));
    counter("kestrel_spec_draft_tokens_total", "Draft tokens verified.", static_cast<double>(sp.drafted));
    counter("kestrel_spec_accepted_tokens_total", "Draft tokens accepted.", static_cast<double>(sp.accepted));
    gauge("kestrel_spec_acceptance_rate", "Share of verified drafts accepted.", sp.acceptance_rate());
    gauge("kestrel_spec_mean_accepted_length", "Tokens per verifying step (accepted drafts plus the target's own).",
          sp.mean_accepted_length());
    out += "# HELP kestrel_spec_acceptance_by_position Share of drafts accepted, by draft position (0: first).\n"
           "# TYPE kestrel_spec_acceptance_by_position gauge\n";
    for (size_t i = 0; i < sp.drafted_at.size(); ++i)
      out += "kestrel_spec_acceptance_by_position{position=\"" + std::to_string(i) + "\"} " +
             number(static_cast<double>(sp.accepted_at[i]) / static_cast<double>(std::max<int64_t>(1, sp.drafted_at[i]))) + "\n";
  }
  out += ttft_.render("kestrel_time_to_first_token_seconds", "Time from request to first token.");
  out += tpot_.render("kestrel_time_per_output_token_seconds", "Mean time between output tokens, per request.");
  if (replicas_.size() > 1) {
    // Data parallel: each replica's share, and how the router chose.
    auto per_replica = [&](const std::string& name, const std::string& help, const char* type, auto value) {
      out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      for (size_t r = 0; r < replicas_.size(); ++r)
        out += name + "{replica=\"" + std::to_string(r) + "\"} " + number(static_cast<double>(value(replicas_[r]))) + "\n";
    };
    per_replica("kestrel_replica_prompt_tokens_total", "Prompt tokens admitted, by data-parallel replica.", "counter",
                [](const EngineStats& e) { return e.prompt_tokens; });
    per_replica("kestrel_replica_prefix_cache_hit_tokens_total", "Prompt tokens served by the replica's prefix cache.",
                "counter", [](const EngineStats& e) { return e.prompt_tokens_cached; });
    per_replica("kestrel_replica_generation_tokens_total", "Tokens generated, by replica.", "counter",
                [](const EngineStats& e) { return e.generated_tokens; });
    per_replica("kestrel_replica_requests_running", "Sequences in the replica's running batch.", "gauge",
                [](const EngineStats& e) { return e.n_running; });
  }
  if (router_) {
    const RouterStats r = router_->stats();
    out += "# HELP kestrel_router_requests_total Requests the data-parallel router sent to each replica.\n"
           "# TYPE kestrel_router_requests_total counter\n";
    for (size_t i = 0; i < r.routed.size(); ++i)
      out += "kestrel_router_requests_total{replica=\"" + std::to_string(i) + "\"} " + std::to_string(r.routed[i]) + "\n";
    counter("kestrel_router_prefix_decisions_total", "Cache-aware routing decisions won by a cached prefix.",
            static_cast<double>(r.by_prefix));
    counter("kestrel_router_load_decisions_total", "Cache-aware routing decisions made by load (no prefix worth it).",
            static_cast<double>(r.by_load));
  }
  out += latency_.render("kestrel_request_latency_seconds", "Time from request to last token.");
  return out;
}

}  // namespace kestrel
