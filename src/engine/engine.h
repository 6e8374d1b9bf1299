// The serving engine: many requests on one model, stepped by one thread. add_request queues a request,
// step() runs one forward pass over whatever the scheduler picked (mixed prefill and decode of every
// running sequence) and returns what each request gained; cancel() ends a request and frees its blocks
// at once. The engine sees token ids only, never JSON or text.
//
// Contract: not thread-safe. One thread (the server's engine thread) makes every call.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace kestrel {

struct EngineConfig {
  int32_t n_blocks = 1024;      // KV pages of block_size tokens, shared by every sequence
  KvType kv_type = KvType::F16;
  bool prefix_caching = true;
  int32_t max_seq_len = 0;      // most tokens per sequence (0: the model's training context), capped by the pool
  SchedulerConfig scheduler;    // its block_size is the page size
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
  int32_t kv_block_size = 0;
  int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  int64_t kv_tokens_used = 0;           // positions of used blocks that hold a token
  // At the step with the most blocks in use so far: those blocks, and their positions holding no token
  // (allocated but unused KV memory).
  int32_t kv_peak_blocks_used = 0;
  int64_t kv_peak_unused_tokens = 0;
  int64_t prompt_tokens = 0, prompt_tokens_cached = 0, generated_tokens = 0;
  int64_t preemptions = 0, steps = 0;
};

class Engine {
 public:
  // The model and pool must outlive the engine.
  Engine(const Model& model, ThreadPool& pool, const EngineConfig& config);

  // Queues a request; error (nothing queued) for an empty prompt, ids outside the vocabulary, a prompt
  // that leaves no room to generate, or out-of-range parameters.
  Result<int64_t> add_request(Request request);
  // Ends every choice of the request now; its blocks are released and a Cancelled output follows.
  void cancel(int64_t request_id);
  std::vector<StepOutput> step();
  bool has_work() const { return scheduler_.has_work() || !cancelled_.empty(); }

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
  };
  GeneratedToken sample(Choice& choice, const Sequence& seq, const float* logits);
  int64_t kv_tokens_filled() const;  // positions of in-use blocks holding a token (shared blocks once)
  FinishReason finish_reason(const Choice& choice, const Sequence& seq, int32_t token) const;

  const Model& model_;
  EngineConfig config_;
  int32_t max_seq_len_;
  KvManager pages_;  // which pages each sequence holds, and the prefix cache
  KvStorage kv_;     // the pages' K/V
  Scheduler scheduler_;
  ModelRunner runner_;
  Timer clock_;
  std::map<int64_t, Choice> choices_;                     // by sequence id
  std::map<int64_t, std::vector<int64_t>> sequences_of_;  // request id -> its sequence ids
  std::vector<StepOutput> cancelled_;                     // reported by the next step()
  int64_t next_request_ = 1, next_sequence_ = 1;
  int64_t prompt_tokens_ = 0, prompt_tokens_cached_ = 0, generated_tokens_ = 0, steps_ = 0;
  int32_t peak_blocks_used_ = 0;
  int64_t peak_unused_tokens_ = 0;
};

}  // namespace kestrel
