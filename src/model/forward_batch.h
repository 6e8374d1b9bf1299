// The tokens of one forward pass, flattened: what each token is, where it sits in its sequence, and which
// block table holds its sequence's KV. Tokens of several sequences may share a batch.
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel {

struct ForwardBatch {
  std::vector<int32_t> tokens;               // [n_tok]
  std::vector<int32_t> positions;            // [n_tok] position of each token within its sequence
  std::vector<const int32_t*> block_tables;  // [n_tok] the block ids of the token's sequence
  std::vector<int32_t> logits_rows;          // indices into tokens whose next-token logits are wanted

  int n_tokens() const { return static_cast<int>(tokens.size()); }
};

}  // namespace kestrel
