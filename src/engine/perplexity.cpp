#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

std::vector<std::vector<int32_t>> perplexity_chunks(std::span<const int32_t> tokens, int32_t n_ctx, int32_t bos) {
  std::vector<std::vector<int32_t>> chunks;
  if (n_ctx < 2) return chunks;
  for (size_t begin = 0; begin + static_cast<size_t>(n_ctx) <= tokens.size(); begin += static_cast<size_t>(n_ctx)) {
    chunks.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                        tokens.begin() + static_cast<std::ptrdiff_t>(begin + static_cast<size_t>(n_ctx)));
    if (bos >= 0) chunks.back()[0] = bos;
  }
  return chunks;
}

void log_softmax(const float* logits, int32_t n, float* log_probs) {
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  for (int32_t i = 0; i < n; ++i) log_probs[i] = static_cast<float>(logits[i] - log_z);
}

Result<std::vector<float>> score_chunk(Generator& generator, std::span<const int32_t> chunk) {
  const auto n_ctx = static_cast<int32_t>(chunk.size());
  if (n_ctx < 4) return Error{"a perplexity chunk needs at least 4 tokens"};
  generator.reset();
  auto logits = generator.eval(chunk, true);  // [n_ctx, n_vocab]
  if (!logits.ok()) return Error{logits.error()};
  const size_t n_vocab = logits->size() / chunk.size();
  const int32_t first = first_scored_token(n_ctx), n_scored = scored_per_chunk(n_ctx);
  std::vector<float> out(static_cast<size_t>(n_scored) * n_vocab);  // [n_scored, n_vocab]
  for (int32_t i = 0; i < n_scored; ++i)  // token first + i is predicted at position first + i - 1
    log_softmax(logits->data() + static_cast<size_t>(first + i - 1) * n_vocab, static_cast<int32_t>(n_vocab),
                out.data() + static_cast<size_t>(i) * n_vocab);
  return out;
}

void PerplexityStats::add(double nll) {
  ++n_;
  sum_ += nll;
  sum_sq_ += nll * nll;
}

double PerplexityStats::perplexity() const { return std::exp(mean_nll()); }

double PerplexityStats::perplexity_error() const {
  if (n_ < 2) return 0;
  const double mean = mean_nll();
  const double var = std::max(0.0, (sum_sq_ / static_cast<double>(n_) - mean * mean) * n_ / (n_ - 1));
  return perplexity() * std::sqrt(var / static_cast<double>(n_));
}

void KlDivergenceStats::add(const float* base, const float* test, int32_t n_vocab) {
  double kld = 0;
  int32_t top_base = 0, top_test = 0;
  for (int32_t i = 0; i < n_vocab; ++i) {
    kld += std::exp(static_cast<double>(base[i])) * (static_cast<double>(base[i]) - test[i]);
    if (base[i] > base[top_base]) top_base = i;
    if (test[i] > test[top_test]) top_test = i;
  }
  kld_.push_back(std::max(0.0, kld));  // rounding can leave a tiny negative sum for equal rows
  same_top1_ += top_base == top_test;
}

double KlDivergenceStats::mean() const {
  double sum = 0;
  for (double k : kld_) sum += k;
  return kld_.empty() ? 0.0 : sum / static_cast<double>(kld_.size());
}

double KlDivergenceStats::mean_error() const {
  const size_t n = kld_.size();
  if (n < 2) return 0;
  const double m = mean();
  double ss = 0;
  for (double k : kld_) ss += (k - m) * (k - m);
  return std::sqrt(ss / static_cast<double>(n - 1) / static_cast<double>(n));
}

double KlDivergenceStats::percentile(double p) const {
  if (kld_.empty()) return 0;
  std::vector<double> v = kld_;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(rank);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

double KlDivergenceStats::top1_agreement() const {
  return kld_.empty() ? 0.0 : static_cast<double>(same_top1_) / static_cast<double>(kld_.size());
}

double KlDivergenceStats::top1_error() const {
  if (kld_.size() < 2) return 0;
  const double p = top1_agreement();
  return std::sqrt(p * (1 - p) / static_cast<double>(kld_.size() - 1));
}

}  // namespace kestrel
