// The one place a step plan becomes the model's input: chunks flattened token by token (positions,
// each chunk's page table, the rows whose logits come back).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/step_plan.h"
#include "model/model_input.h"

namespace kestrel {

struct ForwardBatch {
  std::vector<int32_t> tokens;               // [n_tok]
  std::vector<int32_t> positions;            // [n_tok]
  std::vector<const int32_t*> block_tables;  // [n_tok] -> the token's chunk's pages
  std::vector<int32_t> logits_rows;          // [n_logits] the last n_logits rows of each chunk, in order

  ModelInput input() const { return {tokens, positions, block_tables, logits_rows}; }
  int n_tokens() const { return static_cast<int>(tokens.size()); }
};

// The chunks must outlive the batch (block_tables point into their pages).
ForwardBatch make_forward_batch(std::span<const ScheduledChunk> chunks);

}  // namespace kestrel
