// Turning logits into the next token: penalties, then temperature, then top-k / top-p / min-p filtering,
// then a draw from a per-request RNG (greedy when temperature <= 0). Same seed, same params, same logits
// -> same tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sample/grammar_constraint.h"

namespace kestrel {

struct SamplingParams {
  float temperature = 0.8f;   // <= 0: greedy
  int32_t top_k = 40;         // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;      // 1: off; divides positive logits, multiplies negative ones
  float frequency_penalty = 0.0f;   // subtracts count * this
  float presence_penalty = 0.0f;    // subtracts this once a token has appeared
  int32_t penalty_last_n = 64;      // how many recent tokens the penalties look at (-1: all)
  uint64_t seed = 0;
  // Added to the logits of these tokens before anything else (OpenAI's logit_bias: -100 bans a token,
  // 100 all but forces it). Each bias in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained decoding: only tokens that continue this grammar are drawn (masked before everything
  // else), and its end tokens only once the text is complete. Null: unconstrained.
  std::shared_ptr<const GrammarConstraint> grammar;

  // Error naming the first out-of-range field.
  Status validate() const;
};

// The seed of choice `index` of a request seeded with `seed`: choice 0 keeps the seed, the others get a
// mixed (SplitMix64) value of (seed, index), so the choices of neighbouring seeds do not coincide (choice 1
// of seed 1 is not choice 0 of seed 2).
uint64_t choice_seed(uint64_t seed, int32_t index);

// The distribution a sampler draws from, after every transform: candidates most likely first with their
// unnormalised kept probabilities (probability of ids[i] = weights[i] / total). Greedy: one candidate.
struct TokenDistribution {
  std::vector<int32_t> ids;     // [n_candidates]
  std::vector<double> weights;  // [n_candidates]
  double total = 0;

  double probability(int32_t token) const;  // 0 for a token that is not a candidate
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: [n_vocab], modified in place. history: tokens so far (prompt and generated) for penalties.
  // Under a grammar that allows no token here (its vocabulary cannot spell what must come next): -1.
  int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);
  // The distribution sample() draws from (logits modified in place, as there), without drawing.
  TokenDistribution distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) const;
  // The same under an explicit grammar state: a text ahead of this sampler's (speculative drafts, before
  // they are verified). Empty when the grammar allows no token there.
  TokenDistribution distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
                                 const GrammarState& grammar_state) const;
  // A draw from d with this sampler's RNG (sample() == draw(distribution()), the same RNG use).
  int32_t draw(const TokenDistribution& d);
  // A speculative draft: a draw from distribution(logits, n_vocab, history, grammar_state), which is kept at
  // the end of dists, and grammar_state moved past the drawn token. -1, with nothing changed, where the
  // grammar allows no token.
  int32_t draw_draft(float* logits, int32_t n_vocab, const std::vector<int32_t>& history, GrammarState& grammar_state,
                     std::vector<TokenDistribution>& dists);
  // A uniform number in [0, 1) from this sampler's RNG (speculative acceptance tests).
  double uniform();
  bool greedy() const { return params_.temperature <= 0; }
  // A token joined the text (drawn here or verified elsewhere): advances the grammar, if any.
  void accept(int32_t token);
  // The grammar state of the accepted text, and the state after `token` follows `state` (with no grammar,
  // both are empty states that distribution() ignores).
  const GrammarState& grammar_state() const { return grammar_state_; }
  GrammarState grammar_after(const GrammarState& state, int32_t token) const;
  // Under a grammar: the text is complete and nothing more can follow, so the choice ends here.
  bool grammar_finished() const;
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  GrammarState grammar_state_;  // the text generated so far, under params_.grammar
};

}  // namespace kestrel
