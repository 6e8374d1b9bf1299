// Perplexity and KL divergence of a model over a text, as llama-perplexity computes them: the tokens are
// cut into chunks of n_ctx, each chunk runs from an empty KV cache (its first token replaced by BOS when the
// model adds one), and the second half of each chunk is scored with the first half as context: token j is
// scored by the log-softmax row at position j - 1, for j in [n_ctx / 2 + 1, n_ctx). Against saved base
// log-probabilities (the same chunks under another configuration, e.g. F16 KV) each scored position also
// gives KL(base || this) and whether the two agree on the most likely token.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/generator.h"

namespace kestrel {

// Whole chunks of n_ctx tokens (a partial last chunk is dropped); bos >= 0 replaces each chunk's first token.
std::vector<std::vector<int32_t>> perplexity_chunks(std::span<const int32_t> tokens, int32_t n_ctx, int32_t bos);
// The first scored token of a chunk of n_ctx (n_ctx / 2 + 1); rows for tokens [first, n_ctx) come back.
inline int32_t first_scored_token(int32_t n_ctx) { return n_ctx / 2 + 1; }
inline int32_t scored_per_chunk(int32_t n_ctx) { return n_ctx - first_scored_token(n_ctx); }

// log_probs[i] = logits[i] - log(sum exp(logits)), computed in double; n entries.
void log_softmax(const float* logits, int32_t n, float* log_probs);

// Runs one chunk from an empty cache (the generator is reset first): log-softmax rows
// [scored_per_chunk(n_ctx), n_vocab], row i predicting chunk[first_scored_token(n_ctx) + i].
Result<std::vector<float>> score_chunk(Generator& generator, std::span<const int32_t> chunk);

// Perplexity from the negative log-likelihoods of scored tokens, with its standard error (delta method on
// the mean NLL, as llama-perplexity reports it).
class PerplexityStats {
 public:
  void add(double nll);
  int64_t count() const { return n_; }
  double perplexity() const;
  double perplexity_error() const;
  double mean_nll() const { return n_ ? sum_ / static_cast<double>(n_) : 0.0; }

 private:
  int64_t n_ = 0;
  double sum_ = 0, sum_sq_ = 0;
};

// KL(base || test) per scored position and top-1 agreement, over rows of log-probabilities.
class KlDivergenceStats {
 public:
  // base, test: [n_vocab] log-probabilities at one position.
  void add(const float* base, const float* test, int32_t n_vocab);
  int64_t count() const { return static_cast<int64_t>(kld_.size()); }
  double mean() const;
  double mean_error() const;          // standard error of the mean
  double percentile(double p) const;  // of the per-position values, p in [0, 100]
  double top1_agreement() const;      // share of positions whose most likely token is the same
  double top1_error() const;          // its binomial standard error

 private:
  std::vector<double> kld_;
  int64_t same_top1_ = 0;
};

}  // namespace kestrel
