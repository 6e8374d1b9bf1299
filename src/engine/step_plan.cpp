#include "engine/step_plan.h"

namespace kestrel {

int32_t StepPlan::n_tokens() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.n_tokens();
  return n;
}

int32_t StepPlan::n_logits() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.n_logits;
  return n;
}

}  // namespace kestrel
