#include "engine/forward_batch.h"

#include <cassert>

namespace kestrel {

ForwardBatch make_forward_batch(std::span<const ScheduledChunk> chunks) {
  ForwardBatch batch;
  for (const ScheduledChunk& c : chunks) {
    assert(c.n_logits <= c.n_tokens());
    for (int32_t i = 0; i < c.n_tokens(); ++i) {
      batch.tokens.push_back(c.tokens[static_cast<size_t>(i)]);
      batch.positions.push_back(c.start + i);
      batch.block_tables.push_back(c.pages.data());
      if (i >= c.n_tokens() - c.n_logits) batch.logits_rows.push_back(batch.n_tokens() - 1);
    }
  }
  return batch;
}

}  // namespace kestrel
