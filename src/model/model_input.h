// The tokens of one forward pass, flattened: what each token is, where it sits in its sequence, and which
// page table holds its sequence's KV. Tokens of several sequences may share a pass. A view: the engine
// builds the arrays (engine/forward_batch.h) and keeps them alive across the forward.
#pragma once
#include <cstdint>
#include <span>

namespace kestrel {

struct ModelInput {
  std::span<const int32_t> tokens;               // [n_tok]
  std::span<const int32_t> positions;            // [n_tok] position of each token within its sequence
  std::span<const int32_t* const> block_tables;  // [n_tok] the page ids of the token's sequence
  std::span<const int32_t> logits_rows;          // indices into tokens whose next-token logits are wanted

  int n_tokens() const { return static_cast<int>(tokens.size()); }
};

}  // namespace kestrel
