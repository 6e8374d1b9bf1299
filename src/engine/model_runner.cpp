#include "engine/model_runner.h"

#include <cassert>

namespace kestrel {

std::vector<float> ModelRunner::run(const StepPlan& plan, Scheduler& scheduler) {
  for (const BlockCopy& c : plan.copies) kv_.copy_block(c.src, c.dst);
  ForwardBatch batch;
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence* seq = scheduler.find(c.seq_id);
    assert(seq && c.start + c.n_tokens <= seq->n_tokens());
    for (int32_t i = 0; i < c.n_tokens; ++i) {
      const int32_t pos = c.start + i;
      batch.tokens.push_back(seq->tokens[static_cast<size_t>(pos)]);
      batch.positions.push_back(pos);
      batch.block_tables.push_back(seq->table.ids().data());
    }
    if (c.samples) batch.logits_rows.push_back(batch.n_tokens() - 1);
  }
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  std::vector<float> logits(batch.logits_rows.size() * n_vocab);  // [n_sampling_chunks, n_vocab]
  if (batch.n_tokens() > 0) model_.forward(pool_, batch, kv_, logits.data(), workspace_);
  return logits;
}

}  // namespace kestrel
