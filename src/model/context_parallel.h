// Context (sequence) parallelism for long prompts (issue 16, --cp C): a batch of enough tokens is split by
// position into C contiguous slices, one per rank. Each rank embeds and runs only its slice through every
// layer; in each attention block the ranks pass their slices' K/V rows around a ring (C - 1 exchanges),
// each rank storing every slice's rows into its own paged KV cache, so its queries then attend over every
// earlier position (the causal mask does the rest) and the whole prompt's KV lands on every rank, where
// decode runs. Batches too small to split (decode steps) run whole on every rank, alike. The logits rows
// are computed where their tokens are and summed over the ranks (each row is one rank's, the others'
// zeros). Does not run latent attention (its cached rows differ) yet.
#pragma once
#include <utility>

namespace kestrel {

// The tokens [first, second) of a batch of n_tok that rank `rank` of n_ranks runs.
std::pair<int, int> context_slice(int n_tok, int n_ranks, int rank);

// Whether a batch of n_tok tokens is split over n_ranks (at least kContextMinTokens per rank), or run whole
// on every rank.
constexpr int kContextMinTokens = 4;
inline bool splits_by_context(int n_tok, int n_ranks) { return n_ranks > 1 && n_tok >= kContextMinTokens * n_ranks; }

}  // namespace kestrel
