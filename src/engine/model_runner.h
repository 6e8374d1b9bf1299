// Runs one step plan through the model: copies the plan's KV pages, flattens its chunks into the model's
// input (engine/forward_batch.h) and returns the logits of the rows the chunks ask for. Owns no policy and
// reads nothing but the plan: the engine, the single-sequence generator and `kestrel bench` all run
// their steps through here.
#pragma once
#include <vector>

#include "core/thread_pool.h"
#include "engine/step_plan.h"
#include "kv/kv_storage.h"
#include "model/model.h"

namespace kestrel {

class ModelRunner {
 public:
  ModelRunner(const Model& model, ThreadPool& pool, KvStorage& kv) : model_(model), pool_(pool), kv_(kv) {}

  // logits [plan.n_logits(), n_vocab]: each chunk's last n_logits rows, chunk by chunk.
  std::vector<float> run(const StepPlan& plan);
  // The same into logits [plan.n_logits(), n_vocab].
  void run(const StepPlan& plan, float* logits);
  KvStorage& kv() const { return kv_; }
  // [n_expert] (token, expert) pairs routed so far (mixtures of experts; empty otherwise).
  const std::vector<int64_t>& expert_tokens() const { return workspace_.expert_tokens; }

 private:
  const Model& model_;
  ThreadPool& pool_;
  KvStorage& kv_;
  ForwardWorkspace workspace_;  // activation buffers reused by every step
};

}  // namespace kestrel
