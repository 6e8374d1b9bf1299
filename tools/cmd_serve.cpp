// kestrel serve: the OpenAI-compatible HTTP server (flags as llama-server's where they overlap).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "common.h"
#include "engine/embedder.h"
#include "engine/engine.h"
#include "engine/prefill_worker.h"
#include "engine/speculative_generator.h"
#include "engine/step_plan_relay.h"
#include "model/key_centers.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/replica_router.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

// The longest /v1/embeddings input (its KV pages are allocated on the first request).
constexpr int32_t kMaxEmbeddingInputTokens = 8192;

std::atomic<int> g_signals{0};  // SIGINT/SIGTERM received: the first drains, the second stops at once
extern "C" void on_signal(int) { g_signals.fetch_add(1); }

struct ServeArgs {
  std::string model, alias, chat_template_file, policy = "continuous";
  ServerConfig server;
  int threads = default_threads();
  int ctx = 8192;           // KV cache tokens shared by all sequences
  int parallel = 16;        // sequences running at once
  int batch = 512;          // tokens per step
  // Small pages: at the peak of a batch whose sequences grow in step, each holds one part-filled page,
  // so 4-token pages keep unused KV memory to a few percent (16-token pages: ~11% on the shared-prefix
  // benchmark) while decode attention costs about the same (its tiles span pages).
  int block_size = 4;
  int max_queue = 256;      // requests queued or running before 503
  double shutdown_timeout_s = 30;  // how long a shutdown lets requests in flight finish
  int batch_size = 8;       // static/dynamic batching
  double batch_wait_ms = 100;
  bool no_prefix_cache = false;
  KvTypes kv_types = KvType::F16;
  std::string kv_memory;    // KV cache budget in bytes (overrides -c)
  std::string draft_model;  // speculative decoding
  SpeculativeConfig spec;
  ParallelArgs split;       // --tp / --ep / --pp / --cp: the model split over processes
  int dp = 1;               // data-parallel replicas in this process
  std::string dp_policy = "cache";
  int prefill_ranks = 0;    // prefill/decode disaggregation: ranks [decode_ranks, +prefill_ranks) prefill
  int decode_ranks = 0;     // the ranks from 0 that decode (0: --tp's, one decode group)
  std::string pooling;      // /v1/embeddings: mean, cls or last ("": the model's)
};

// The engine's settings from the flags, with n_blocks KV pages.
EngineConfig engine_config(const ServeArgs& a, int32_t n_blocks) {
  EngineConfig config;
  config.n_blocks = n_blocks;
  config.kv_types = a.kv_types;
  config.prefix_caching = !a.no_prefix_cache;
  config.scheduler.block_size = a.block_size;
  config.scheduler.max_running = a.parallel;
  config.scheduler.max_batch_tokens = a.batch;
  config.scheduler.batch_size = a.batch_size;
  config.scheduler.batch_wait_ms = a.batch_wait_ms;
  config.scheduler.policy = a.policy == "static" ? BatchPolicy::Static
                            : a.policy == "dynamic" ? BatchPolicy::Dynamic : BatchPolicy::Continuous;
  config.spec = a.spec;
  return config;
}

// --prefill-ranks P --decode-ranks D [--tp T]: the job of `mpirun -np P+D` in groups of T ranks (the model
// split over each by tensor parallelism): group 0, ranks [0, D = T), decodes, the others prefill. Null after
// printing why not (ending every rank alike when launched by mpirun).
std::unique_ptr<DataParallelRanks> launch_disaggregated(const ServeArgs& a) {
  auto world = open_world();
  if (!world) return nullptr;
  const int tp = a.split.tp, decode = a.decode_ranks > 0 ? a.decode_ranks : tp;
  const int want = a.prefill_ranks + decode, size = world->size();
  std::string why;
  if (a.split.pp * a.split.ep * a.split.cp > 1)
    why = "--prefill-ranks does not combine with --pp, --ep or --cp yet (each role runs whole models, or splits them by --tp)";
  else if (a.dp > 1)
    why = "--prefill-ranks does not combine with --dp yet";
  else if (!a.draft_model.empty() || a.spec.ngram > 0)
    why = "speculative decoding does not run with prefill/decode disaggregation yet";
  else if (decode != tp)
    why = "--decode-ranks " + std::to_string(decode) + ": one decode group for now, rank 0 and the ranks of its --tp " +
          std::to_string(tp) + " group: --decode-ranks " + std::to_string(tp);
  else if (a.prefill_ranks % tp != 0)
    why = "--prefill-ranks " + std::to_string(a.prefill_ranks) + " is not a multiple of --tp " + std::to_string(tp) +
          " (each prefill group splits the model over --tp ranks)";
  else if (size != want)
    why = "--prefill-ranks " + std::to_string(a.prefill_ranks) + " + --decode-ranks " + std::to_string(decode) +
          " needs " + std::to_string(want) + " processes" +
          (size == 1 ? ": run under mpirun -np " + std::to_string(want) : ", but it was launched as " + std::to_string(size));
  else if (tp > 1 && !world->threads_at_once())
    why = "--prefill-ranks with --tp needs an MPI library with MPI_THREAD_MULTIPLE";
  if (!why.empty()) {
    refuse_launch(*world, why);
    return nullptr;
  }
  return checked_layout(make_data_parallel_ranks(std::move(world), size / tp, tp, 1, 1, 1, /*link_leaders=*/false));
}

// Split over processes: rank 0 tells the other ranks how many KV pages to make once it is ready to serve, or 0
// when it cannot start (then they exit too). Waited for patiently: rank 0 may take a while.
class FollowerStart {
 public:
  explicit FollowerStart(Communicator& world) : world_(world) {}
  ~FollowerStart() {
    if (!sent_) go(0);
  }
  void go(int32_t n_blocks) {
    world_.broadcast_patiently(&n_blocks, sizeof n_blocks, 0);
    sent_ = true;
  }

 private:
  Communicator& world_;
  bool sent_ = false;
};

// A rank other than 0: no HTTP, tokenizer or scheduler. Split model: it runs its replica's step plans on its
// shard (a replica's leader takes them from rank 0 over its link and returns the logits, the other ranks
// from their replica's first rank). Disaggregated: the decode group's other ranks follow rank 0's plans; a
// prefill group's leader prefills the prompts rank 0 sends, relaying its plans to the rest of its group,
// and every rank of the group sends rank 0 its share of the KV pages. Either until rank 0 stops. Signals
// are rank 0's to handle (it drains, then stops the others).
int follow_rank_zero(const ServeArgs& a, const Model& model, Communicator& job, const DataParallelRanks& ranks,
                     bool disaggregated) {
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  int32_t n_blocks = 0;
  job.broadcast_patiently(&n_blocks, sizeof n_blocks, 0);
  if (n_blocks <= 0) return 1;
  ThreadPool pool(a.threads);
  Communicator& replica = *ranks.groups->world;
  if (disaggregated && ranks.replica > 0) {  // a prefill group
    const EngineConfig config = engine_config(a, n_blocks);
    if (replica.rank() == 0) serve_prefills(job, replica, model, pool, config);
    else follow_prefills(job, replica, model, pool, config);
    return 0;
  }
  KvStorage kv(model.kv_spec(n_blocks, a.block_size, a.kv_types));  // this rank's KV heads, rank 0's page ids
  center_keys(kv, model, pool);  // as the Engine does on rank 0 (a collective forward for quantized K)
  ModelRunner runner(model, pool, kv);
  if (!ranks.leader()) {
    follow_step_plans(replica, runner);
    return 0;
  }
  std::unique_ptr<StepPlanRelay> relay = replica.size() > 1 ? std::make_unique<StepPlanRelay>(replica) : nullptr;
  lead_replica(*ranks.links.at(0), runner, relay.get(), model.hparams().n_vocab);
  return 0;
}

int run_serve(ServeArgs& a) {
  // Split over processes: the model (--tp, --pp, --ep, --cp), or its work by role (--prefill-ranks).
  // Data parallel over ranks too (--dp under mpirun): replicas of the split model on their own ranks.
  const bool disaggregated = a.prefill_ranks > 0;
  std::unique_ptr<DataParallelRanks> ranks =
      disaggregated ? launch_disaggregated(a) : launch_replicas(a.split, !a.draft_model.empty() || a.spec.ngram > 0, a.dp);
  if (!ranks) return 1;
  Communicator& world = *ranks->job;  // every rank of the job
  const ProcessGroups* groups = ranks->groups.get();  // this rank's replica or role group
  const bool replicas_over_ranks = !disaggregated && ranks->replicas > 1;
  auto model = load_model(a.model, world.rank() != 0, groups);
  if (!model && world.size() > 1) world.abort("error: the model did not load on rank " + std::to_string(world.rank()), 1);
  if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
  // Every rank makes as many KV pages as rank 0; a --kv-memory budget must hold on the rank whose share of
  // the layers and heads takes the most bytes per token (pipeline stages may hold more layers than rank 0's).
  const float own_bytes_per_token = static_cast<float>(model->kv_spec(1, a.block_size, a.kv_types).bytes_per_token());
  std::vector<float> bytes_per_token(static_cast<size_t>(world.size()));  // [ranks]
  world.all_gather(&own_bytes_per_token, 1, bytes_per_token.data());
  if (world.rank() != 0) return follow_rank_zero(a, *model, world, *ranks, disaggregated);
  FollowerStart followers(world);
  auto tokenizer = Tokenizer::from_gguf(model->file());
  if (!tokenizer.ok() || !tokenizer->has_vocab()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.ok() ? "the model has no tokenizer vocabulary" : tokenizer.error().c_str());
    return 1;
  }
  const std::optional<std::string> source = chat_template_source(*model, a.chat_template_file);
  if (!source) return 1;
  const std::string& template_source = *source;
  std::unique_ptr<ChatTemplate> chat_template;
  std::string template_error;
  auto parsed = ChatTemplate::parse(template_source);
  if (parsed.ok()) chat_template = std::make_unique<ChatTemplate>(std::move(parsed).value());
  else template_error = "the chat template is not supported: " + parsed.error();
  if (!chat_template) std::fprintf(stderr, "warning: %s; chat requests will be refused\n", template_error.c_str());
  const Tokenizer& tok = *tokenizer;
  const std::string bos = tok.vocab().bos >= 0 ? tok.token_to_piece(tok.vocab().bos, true) : "";
  const std::string eos = tok.vocab().eos >= 0 ? tok.token_to_piece(tok.vocab().eos, true) : "";
  ChatRenderer render = [&](const std::vector<ChatMessage>& messages, const nlohmann::ordered_json& tools) -> Result<std::string> {
    if (!chat_template) return Error{template_error};
    return chat_template->render(messages, true, bos, eos, tools);
  };
  a.server.tool_call_format = detect_tool_call_format(template_source);

  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty() && !(draft = load_draft_model(a.draft_model, *model))) return 1;
  if (draft || a.spec.ngram > 0) {
    if (Status s = check_speculation(*model, draft.get(), a.spec); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.error().c_str());
      return 1;
    }
  }
  int32_t n_blocks = (a.ctx + a.block_size - 1) / a.block_size;
  // A draft model keeps its own KV for as many tokens as the target's: a token costs both.
  const size_t kv_bytes_per_token = static_cast<size_t>(*std::max_element(bytes_per_token.begin(), bytes_per_token.end())) +
                                    (draft ? draft->kv_spec(1, a.block_size, a.kv_types).bytes_per_token() : 0);
  if (!a.kv_memory.empty()) {
    // A byte budget: a smaller KV type holds more tokens in the same memory.
    auto bytes = parse_byte_size(a.kv_memory);
    if (!bytes.ok()) {
      std::fprintf(stderr, "error: --kv-memory: %s\n", bytes.error().c_str());
      return 1;
    }
    const uint64_t blocks = bytes.value() / (kv_bytes_per_token * static_cast<uint64_t>(a.block_size));
    if (blocks < 1 || blocks > (1u << 30)) {
      std::fprintf(stderr, "error: --kv-memory %s holds %llu KV blocks of %d tokens (%zu bytes per token, %s)\n",
                   a.kv_memory.c_str(), static_cast<unsigned long long>(blocks), a.block_size, kv_bytes_per_token,
                   a.kv_types.name().c_str());
      return 1;
    }
    n_blocks = static_cast<int32_t>(blocks);
  }
  EngineConfig config = engine_config(a, n_blocks);
  if (disaggregated) {
    config.prefill_world = &world;  // the prompts go to the prefill ranks
    config.prefix_caching = false;  // the prefix cache lives there
  }
  followers.go(config.n_blocks);
  // Data parallel: --dp engines, each with its threads, KV cache and prefix cache, behind one router.
  Metrics metrics;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::unique_ptr<EngineLoop>> loops;
  std::vector<RequestQueue*> replicas;
  // /v1/embeddings on replica 0's engine thread, when the model is whole in this process.
  std::unique_ptr<Embedder> embedder;
  for (int r = 0; r < a.dp; ++r) {
    EngineConfig replica_config = config;
    // Replicas 1.. on other ranks: their engines schedule and sample here, their forward passes run there.
    if (replicas_over_ranks && r > 0) replica_config.replica_link = ranks->links.at(static_cast<size_t>(r - 1)).get();
    pools.push_back(std::make_unique<ThreadPool>(replica_config.replica_link ? 1 : a.threads));
    engines.push_back(std::make_unique<Engine>(*model, *pools.back(), replica_config, draft.get()));
    if (r == 0 && !(groups && groups->split())) {
      EmbedderConfig embedding;
      embedding.pooling = a.pooling.empty() ? model_pooling(*model) : parse_pooling(a.pooling).value();
      embedding.max_input_tokens = std::min<int32_t>(engines.back()->max_seq_len(), kMaxEmbeddingInputTokens);
      embedding.max_batch_tokens = a.batch;
      embedder = std::make_unique<Embedder>(*model, *pools.back(), embedding);
    }
    loops.push_back(std::make_unique<EngineLoop>(
        *engines.back(), static_cast<size_t>(a.max_queue),
        [&metrics, r](const std::vector<StepOutput>&, const EngineStats& s) { metrics.engine_stats(s, static_cast<size_t>(r)); },
        r == 0 ? embedder.get() : nullptr));
    loops.back()->start();
    replicas.push_back(loops.back().get());
  }
  RouterConfig routing;
  routing.policy = a.dp_policy == "round-robin" ? RoutePolicy::RoundRobin : RoutePolicy::CacheAware;
  ReplicaRouter router(replicas, routing);
  if (a.dp > 1) metrics.set_router(&router);
  RequestQueue& front = a.dp > 1 ? static_cast<RequestQueue&>(router) : *loops[0];
  if (a.server.model_name.empty() || a.server.model_name == "kestrel")
    a.server.model_name = a.alias.empty() ? std::filesystem::path(a.model).filename().string() : a.alias;
  HttpServer server(front, tok, render, metrics, a.server, engines[0]->max_seq_len());
  if (embedder)
    server.serve_embeddings(loops[0].get(), model->hparams().n_embd, embedder->config().max_input_tokens);
  if (Status st = server.start(); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.error().c_str());
    return 1;
  }
  std::fprintf(stderr, "kestrel serve: listening on http://%s:%d (model %s, %s%d threads, %d KV blocks of %d tokens: "
               "%.1f MiB at %zu bytes per token (%s%s%s), at most %d requests in flight)\n", a.server.host.c_str(),
               server.port(), a.server.model_name.c_str(),
               a.dp > 1 ? (std::to_string(a.dp) + " data-parallel replicas (" + a.dp_policy + " routing" +
                           (replicas_over_ranks ? ", each on its own ranks" : "") + "), each ").c_str() : "",
               a.threads, config.n_blocks, a.block_size,
               static_cast<double>(kv_bytes_per_token) * config.n_blocks * a.block_size / 1048576.0, kv_bytes_per_token,
               a.kv_types.name().c_str(), draft ? ", target and draft" : "",
               disaggregated ? (", decode rank" + (groups->split() ? "s 0-" + std::to_string(groups->tp() - 1) + " (tp " +
                                                                  std::to_string(groups->tp()) + ")" : std::string(" 0")) +
                                " of " + std::to_string(world.size()) + ", prompts prefilled by ranks " +
                                std::to_string(groups->world->size()) + "-" + std::to_string(world.size() - 1) +
                                (groups->split() ? " in groups of " + std::to_string(groups->tp()) : std::string())).c_str()
               : world.size() > 1 ? (", rank 0 of " + std::to_string(world.size()) +
                                     (groups->split() ? ": " + groups->describe() + (replicas_over_ranks ? " each" : "") : "")).c_str()
               : "",
               server.max_in_flight());

  // Ready once one real forward pass went through every engine (straight to each, past the router).
  for (auto& loop : loops) {
    Request warmup;
    warmup.prompt = {tok.vocab().bos >= 0 ? tok.vocab().bos : 0};
    warmup.max_tokens = 1;
    warmup.sampling.temperature = 0;
    auto channel = std::make_shared<RequestChannel>();
    if (loop->submit(warmup, channel)) {
      for (;;) {
        auto e = channel->pop(std::chrono::milliseconds(100));
        if (!e) continue;
        if (e->kind == ChannelEvent::Kind::Rejected || e->output.finish != FinishReason::None) break;
      }
    }
  }
  server.set_ready(true);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (g_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Graceful shutdown: refuse new requests, let those in flight finish (up to --shutdown-timeout, or until a
  // second signal), then cancel what is left: those requests end with finish_reason "abort" and an error.
  std::fprintf(stderr, "kestrel serve: shutting down (%zu requests in flight; a second signal stops at once)\n",
               front.n_pending());
  server.refuse_new_requests();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.shutdown_timeout_s);
  while (front.n_pending() > 0 && std::chrono::steady_clock::now() < deadline && g_signals.load() < 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (front.n_pending() > 0)
    std::fprintf(stderr, "kestrel serve: %s; cancelling %zu requests\n",
                 g_signals.load() >= 2 ? "second signal" : "shutdown timeout", front.n_pending());
  for (auto& loop : loops) loop->stop(/*finish_in_flight=*/false);
  // Let the handlers send what the cancellation produced (a stream's "abort" chunk and error event) before
  // the HTTP server stops writing.
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (server.n_in_flight() > 0 && std::chrono::steady_clock::now() < flush_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server.stop();
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, Action& run) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->server.port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Compute threads")->capture_default_str();
  auto* ctx = cmd->add_option("-c,--ctx-size", args->ctx, "KV cache size in tokens, shared by all sequences")->capture_default_str();
  cmd->add_option("--kv-memory", args->kv_memory,
                  "KV cache size in bytes instead (e.g. 512M, 2GiB): the tokens it holds depend on the KV type")
      ->excludes(ctx);
  cmd->add_option("--parallel", args->parallel, "Most sequences decoded together (also -np)")->capture_default_str();
  cmd->add_option("-b,--batch-size", args->batch, "Most tokens per forward pass (the step's token budget)")->capture_default_str();
  cmd->add_option("--block-size", args->block_size, "Tokens per KV block (4, 8 or a multiple of 16 run the fast kernels)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--api-key", args->server.api_key, "Require this Bearer key on API routes");
  cmd->add_option("-a,--alias", args->alias, "Model name reported by the API (default: the file name)");
  cmd->add_option("--chat-template-file", args->chat_template_file, "Jinja chat template to use instead of the model's");
  cmd->add_option("--batch-policy", args->policy, "continuous, static or dynamic batching")
      ->check(CLI::IsMember({"continuous", "static", "dynamic"}))->capture_default_str();
  cmd->add_option("--static-batch", args->batch_size, "Sequences per batch for static/dynamic batching")->capture_default_str();
  cmd->add_option("--batch-wait-ms", args->batch_wait_ms, "Dynamic batching: longest wait for a batch to fill")->capture_default_str();
  cmd->add_option("--max-queue", args->max_queue, "Requests queued or running before new ones get 503")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--max-body", args->server.max_body_bytes, "Largest request body in bytes (413 beyond)")->capture_default_str();
  cmd->add_option("--max-header-bytes", args->server.max_header_bytes, "Largest request head in bytes (431 beyond)")
      ->check(CLI::Range(1024, 1 << 24))->capture_default_str();
  cmd->add_option("--threads-http", args->server.http_threads,
                  "HTTP connection threads (0: --max-queue + 32, the 32 kept for refusals, health and metrics)")
      ->check(CLI::Range(0, 1 << 16))->capture_default_str();
  cmd->add_option("--shutdown-timeout", args->shutdown_timeout_s,
                  "Seconds a shutdown lets requests in flight finish before cancelling them")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("--cors-origin", args->server.cors_origin,
                  "Browser origin allowed to call the API (\"*\": any); otherwise cross-origin requests get 403");
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Do not share KV blocks between requests");
  add_cache_type_options(cmd, args->kv_types);
  add_speculative_options(cmd, args->draft_model, args->spec, true);
  add_parallel_options(cmd, args->split);
  cmd->add_option("--dp", args->dp, "Data-parallel replicas, each with its own KV and prefix cache (-t threads and -c "
                                    "tokens each), behind one router: in this process, or under mpirun each on its own "
                                    "ranks (-np = dp x tp x ep x pp x cp)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--prefill-ranks", args->prefill_ranks,
                  "Prefill/decode disaggregation: N ranks of mpirun, after the decode ranks, compute prompts (and hold "
                  "the prefix cache) and send their KV pages to the decode ranks; with --tp T, in groups of T ranks "
                  "each splitting the model; run under mpirun -np N + --decode-ranks")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--decode-ranks", args->decode_ranks,
                  "Ranks that decode, from rank 0 (with --prefill-ranks; one decode group for now: --tp's ranks, the "
                  "default)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--pooling", args->pooling,
                  "How /v1/embeddings pools the tokens' hidden states: mean, cls or last (default: the model's "
                  "pooling_type, else last)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--dp-policy", args->dp_policy,
                  "How the router picks a replica: cache (the longest cached prompt prefix, unless loads drift apart) "
                  "or round-robin")
      ->check(CLI::IsMember({"cache", "round-robin"}))->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_serve(*args); }; });
}

}  // namespace kestrel::cli
