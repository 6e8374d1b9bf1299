#include "engine/model_runner.h"

#include "engine/forward_batch.h"

namespace kestrel {

std::vector<float> ModelRunner::run(const StepPlan& plan) {
  std::vector<float> logits(static_cast<size_t>(plan.n_logits()) * static_cast<size_t>(model_.hparams().n_vocab));
  run(plan, logits.data());
  return logits;
}

void ModelRunner::run(const StepPlan& plan, float* logits) {
  for (const BlockCopy& c : plan.copies) kv_.copy_block(c.src, c.dst);
  const ForwardBatch batch = make_forward_batch(plan.chunks);
  if (batch.n_tokens() > 0) model_.forward(pool_, batch.input(), kv_, logits, workspace_);
}

}  // namespace kestrel
