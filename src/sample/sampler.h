// Turning logits into the next token: penalties, then temperature, then top-k / top-p / min-p filtering,
// then a draw from a per-request RNG (greedy when temperature <= 0). Same seed, same params, same logits
// -> same tokens.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"

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

  // Error naming the first out-of-range field.
  Status validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // logits: [n_vocab], modified in place. history: tokens so far (prompt and generated) for penalties.
  int32_t sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kestrel
