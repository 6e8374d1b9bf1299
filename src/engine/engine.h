// The serving engine: many requests on one model, stepped by one thread. add_request queues a request,
// step() runs one forward pass over whatever the scheduler picked (mixed prefill and decode of every
// running sequence) and returns what each request gained; cancel() ends a request and frees its blocks
// at once. The engine sees token ids only, never JSON or text.
//
// Speculative decoding (a draft model, or n-gram drafts from each sequence's own tokens): before a step,
// each decoding sequence proposes drafts; the step verifies them with the pending token in one chunk
// (spec/verify.h), keeps the accepted prefix plus the target's own next token, and rolls the KV back
// past the rest (Scheduler::accept_drafts). The output is the target's alone: the same tokens when
// greedy, the same distribution when sampling. It runs only while at most spec.max_batch sequences decode,
// and then only where it measured cheaper per token than plain steps (spec/spec_controller.h).
//
// Split over processes (tensor and pipeline parallel, model.process_groups()): the engine runs on rank 0 and
// sends every step plan to the other ranks, which run it in follow_step_plans (engine/step_plan_relay.h);
// destroying the engine lets them stop. No speculative decoding there.
//
// Data-parallel replica on other ranks (config.replica_link): the engine schedules and samples on rank 0
// and each step's forward pass runs on the replica's ranks. No speculative decoding or disaggregation there.
//
// Prefill/decode disaggregation (config.prefill_world): the engine runs on rank 0 and decodes; each new
// prompt goes to a prefill rank (engine/prefill_client.h), and once its KV pages and logits are back the
// sequence joins the running set with pages of its own (Scheduler::add_prefilled) and samples its first
// token. A sequence preempted later is recomputed here. The prefix cache lives on the prefill ranks. With
// the model split by --tp in each role, the decode group's other ranks get their shares of a prompt's pages
// with the next step plan (StepPlan::imported_pages).
//
// Contract: not thread-safe. One thread (the server's engine thread) makes every call.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "dist/communicator.h"
#include "engine/prefill_client.h"
#include "engine/scheduler.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/spec_config.h"
#include "spec/spec_controller.h"
#include "spec/spec_stats.h"

namespace kestrel {

struct EngineConfig {
  int32_t n_blocks = 1024;      // KV pages of block_size tokens, shared by every sequence
  KvTypes kv_types = KvType::F16;
  bool prefix_caching = true;
  int32_t max_seq_len = 0;      // most tokens per sequence (0: the model's training context), capped by the pool
  SchedulerConfig scheduler;    // its block_size is the page size
  SpeculativeConfig spec;       // used with a draft model, or when spec.ngram > 0
  // Prefill/decode disaggregation: the ranks of this world after this engine's (rank 0 and, with a model
  // split over processes, its group's) prefill every prompt in groups of that size; this engine decodes.
  // Null: prompts are computed here.
  Communicator* prefill_world = nullptr;
  // Data-parallel replicas over ranks (dist/data_parallel_ranks.h): this engine's replica runs on other
  // ranks, linked to this process (rank 0) by this communicator (its leader rank 1). The engine schedules
  // and samples here; every forward pass runs there (engine/step_plan_relay.h ReplicaLink) and the model
  // here gives only the shapes. Null: the forward passes run here.
  Communicator* replica_link = nullptr;
};

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 16;            // most tokens to generate per choice
  std::vector<int32_t> stop_tokens;   // generating one ends the choice (it is not returned)
  int32_t n = 1;                      // choices, sharing the prompt's blocks
  int32_t top_logprobs = -1;          // -1: no logprobs; 0: the chosen token's; k: also the k most likely
  std::string cache_salt;             // prefix-cache namespace
};

enum class FinishReason { None, Stop, Length, Cancelled };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled" ("" for None)

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0;               // log-probability under the model (raw logits), when requested
  std::vector<TokenLogprob> top;   // the most likely tokens, when requested
};

struct StepOutput {
  int64_t request_id = 0;
  int32_t index = 0;                    // which choice (0..n-1)
  std::vector<GeneratedToken> tokens;   // generated this step
  FinishReason finish = FinishReason::None;
  int32_t n_prompt = 0;
  int32_t n_cached_prompt = 0;          // prompt tokens served by the prefix cache
};

struct EngineStats {
  size_t n_waiting = 0, n_running = 0;
  size_t peak_running = 0;  // most sequences running (holding KV) at once so far
  int32_t kv_block_size = 0;
  int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  int64_t kv_tokens_used = 0;           // positions of used blocks that hold a token
  int64_t kv_bytes_per_token = 0;       // over all layers and KV heads, at the cache's element type
  int64_t kv_bytes = 0;                 // the whole cache
  // At the step with the most blocks in use so far: those blocks, and their positions holding no token
  // (allocated but unused KV memory).
  int32_t kv_peak_blocks_used = 0;
  int64_t kv_peak_unused_tokens = 0;
  int64_t prompt_tokens = 0, prompt_tokens_cached = 0, generated_tokens = 0;
  int64_t preemptions = 0, steps = 0;
  bool speculative = false;  // speculation configured
  SpecStats spec;            // drafted and accepted tokens, by draft position
  int32_t tensor_parallel_ranks = 1, pipeline_stages = 1, expert_parallel_ranks = 1, context_parallel_ranks = 1;
  std::vector<int64_t> expert_tokens;  // [n_expert] (token, expert) pairs routed so far (mixtures of experts)
  CommStats comm;            // split: rank 0's messages so far (plans relayed, all-reduces, gathers, activations)
  DisaggregationStats disaggregation;  // prefill/decode disaggregation (prefill_ranks 0: off)
  double decode_step_seconds = 0;      // wall time of steps that only decoded (no prompt chunk) so far
  int64_t decode_steps = 0;
  double forward_seconds = 0;        // wall time inside forward passes so far
  double pipeline_wait_seconds = 0;  // of which rank 0 (the first stage) waited on later stages
};

class Engine {
 public:
  // The models and pool must outlive the engine. draft: a draft model for speculative decoding (null:
  // none); its vocabulary must be the model's (check_speculation in engine/speculative_generator.h).
  Engine(const Model& model, ThreadPool& pool, const EngineConfig& config, const Model* draft = nullptr);
  ~Engine();

  // Queues a request; error (nothing queued) for an empty prompt, ids outside the vocabulary, a prompt
  // that leaves no room to generate, or out-of-range parameters.
  Result<int64_t> add_request(Request request);
  // Ends every choice of the request now; its blocks are released and a Cancelled output follows.
  void cancel(int64_t request_id);
  std::vector<StepOutput> step();
  bool has_work() const { return scheduler_.has_work() || !cancelled_.empty() || !prefilling_.empty(); }

  // Disaggregated: step() also takes the prefill ranks' messages (their state for /metrics), so the
  // serving loop calls it now and then while idle.
  bool polls_while_idle() const { return prefill_ != nullptr; }
  EngineStats stats() const;
  int32_t max_seq_len() const { return max_seq_len_; }
  const BlockPool& block_pool() const { return pages_.pool(); }

 private:
  struct Choice {
    int64_t request_id;
    int32_t index;
    std::shared_ptr<const Request> request;
    Sampler sampler;
    bool forks_pending;  // n > 1: the other choices fork from this one once its prompt is computed
    Sampler draft_sampler;                         // draws the draft model's tokens (its own RNG stream)
    AdaptiveDraftLength draft_length;
    std::vector<TokenDistribution> draft_dists;    // [drafts] the draft model's, for this step's verification
  };
  Choice make_choice(int64_t request_id, int32_t index, std::shared_ptr<const Request> request, SamplingParams params,
                     bool forks_pending) const;
  // Sets this step's drafts of the decoding sequences (speculative decoding); returns how many decode.
  // prompt_catch_up: set when the draft model caught up with a new sequence's prompt (a one-time cost
  // that does not belong to this step's cost per token).
  int32_t propose_drafts(bool& prompt_catch_up);
  // The tokens a sampling chunk yields: one sampled, or the verified drafts and the target's next token;
  // the last is -1 where the request's grammar allows no token. rows: [n_logits, n_vocab] the chunk's
  // logits (modified in place).
  std::vector<int32_t> next_tokens(Choice& choice, const Sequence& seq, const ScheduledChunk& c, float* rows);
  // logits: [n_vocab] raw, read only when the request asks for logprobs.
  GeneratedToken with_logprobs(const Choice& choice, int32_t token, const float* logits) const;
  // The sampling chunk's outputs: its token(s) for each choice of its sequence (forking the other choices
  // the first time). rows: [c.n_logits, n_vocab] its logits.
  void emit(const ScheduledChunk& c, const float* rows, std::vector<StepOutput>& outputs);
  // Disaggregated: prompts whose KV arrived join the running set while pages allow, and sample.
  void admit_prefilled(std::vector<StepOutput>& outputs);
  void end_sequence(int64_t seq_id);
  int64_t kv_tokens_filled() const;  // positions of in-use blocks holding a token (shared blocks once)
  double pipeline_wait_s() const;    // time inside pipeline messages so far (0 unless split)

  const Model& model_;
  EngineConfig config_;
  int32_t max_seq_len_;
  KvManager pages_;  // which pages each sequence holds, and the prefix cache
  Scheduler scheduler_;
  // The pages' K/V in this process and the runner of plans over them; null when a replica on other ranks
  // holds the pages and runs the plans (remote_).
  struct LocalPages;
  std::unique_ptr<LocalPages> local_;
  std::unique_ptr<class StepPlanRelay> relay_;  // split over processes: sends each plan to the other ranks
  std::unique_ptr<class ReplicaLink> remote_;    // a replica on other ranks: runs each plan there instead
  std::unique_ptr<PrefillClient> prefill_;        // disaggregated: the prefill ranks
  std::map<int64_t, Sequence> prefilling_;        // disaggregated: sequences whose prompt is on a prefill rank
  std::deque<PrefilledPrompt> prefilled_;         // arrived, waiting for pages here (in arrival order)
  // Disaggregated with a split model: pages imported here whose shares go to the other ranks with the next
  // plan. imported_shares_: [group size][imported_pages_.size() * page_bytes] (entry 0 unused).
  std::vector<int32_t> imported_pages_;
  std::vector<std::vector<uint8_t>> imported_shares_;
  std::unique_ptr<class ModelDrafter> drafter_;  // the draft model's side, when speculating with one
  bool speculative_;
  SpecStats spec_stats_;
  SpeculationController spec_control_;
  Timer clock_;
  std::map<int64_t, Choice> choices_;                     // by sequence id
  std::map<int64_t, std::vector<int64_t>> sequences_of_;  // request id -> its sequence ids
  std::vector<StepOutput> cancelled_;                     // reported by the next step()
  int64_t next_request_ = 1, next_sequence_ = 1;
  int64_t prompt_tokens_ = 0, prompt_tokens_cached_ = 0, generated_tokens_ = 0, steps_ = 0;
  double forward_s_ = 0;             // inside the plans' runs
  double step_pipeline_wait_s_ = 0;  // of which inside pipeline messages
  double decode_step_s_ = 0;         // steps that only decoded: their wall time
  int64_t decode_steps_ = 0;
  int32_t peak_blocks_used_ = 0;
  size_t peak_running_ = 0;
  int64_t peak_unused_tokens_ = 0;
};

}  // namespace kestrel
