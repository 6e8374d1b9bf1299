// Runs one step plan through the model: copies the plan's KV pages, flattens its chunks into a
// ForwardBatch (the only place with the index math) and returns the logits of the rows that sample.
// Owns no policy; the scheduler decided everything.
#pragma once
#include <vector>

#include "core/thread_pool.h"
#include "engine/scheduler.h"
#include "kv/kv_storage.h"
#include "model/model.h"

namespace kestrel {

class ModelRunner {
 public:
  ModelRunner(const Model& model, ThreadPool& pool, KvStorage& kv) : model_(model), pool_(pool), kv_(kv) {}

  // logits [n_sampling_chunks, n_vocab], rows in the order the sampling chunks appear in the plan.
  // Every chunk's sequence must be running in `scheduler` (the plan is not yet committed).
  std::vector<float> run(const StepPlan& plan, Scheduler& scheduler);

 private:
  const Model& model_;
  ThreadPool& pool_;
  KvStorage& kv_;
  ForwardWorkspace workspace_;  // activation buffers reused by every step
};

}  // namespace kestrel
