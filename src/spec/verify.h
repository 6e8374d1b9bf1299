// Verifying drafted tokens against the target model (speculative decoding), so that the output is exactly
// what the target alone would produce: token for token when greedy, and in distribution when sampling.
//
// Greedy: draft i is kept while it is the target's choice at its position; the first mismatch is replaced
// by the target's choice. Sampling (Leviathan et al., Chen et al.): draft x_i, drawn from the drafter's q_i,
// is kept with probability min(1, p_i(x_i) / q_i(x_i)), p_i the target's distribution after the same
// transforms the plain sampler applies (penalties over the history including the drafts kept so far,
// temperature, top-k, top-p, min-p); the first rejection draws instead from normalize(max(0, p_i - q_i)).
// When all K are kept, a bonus token is drawn from p_K. A deterministic drafter (n-gram) is a point mass
// q = 1 at its token: a draft is then kept with probability p_i(x_i), and a rejection draws from p_i
// without x_i.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "sample/sampler.h"

namespace kestrel {

struct Verification {
  int32_t n_accepted = 0;  // drafts [0, n_accepted) are kept
  int32_t next = 0;        // then this token: the correction at the first rejection, or the bonus token;
                           // -1 where the sampler's grammar allows no token (the text ends there)
};

// drafts: [K]; draft_dists: [K] the drafter's distribution at each draft, or empty for a deterministic
// drafter; target_logits: [K + 1, n_vocab], row i predicting the token after drafts[0, i) (modified in
// place); history: the tokens before drafts[0] (for penalties). Draws use the sampler's RNG. Under a
// grammar, row i is masked by the grammar's state after the sampler's accepted text and drafts[0, i), so a
// draft the grammar does not allow is rejected like any token the target would not choose.
Verification verify_drafts(std::span<const int32_t> drafts, std::span<const TokenDistribution> draft_dists,
                           float* target_logits, int32_t n_vocab, std::vector<int32_t> history, Sampler& sampler);

}  // namespace kestrel
