#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace kestrel {

Status SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return Status(Error{what}); };
  if (!std::isfinite(temperature) || temperature < 0) return bad("temperature must be >= 0");
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1) return bad("top_p must be in (0, 1]");
  if (!std::isfinite(min_p) || min_p < 0 || min_p > 1) return bad("min_p must be in [0, 1]");
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0) return bad("repeat_penalty must be > 0");
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2) return bad("frequency_penalty must be in [-2, 2]");
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2) return bad("presence_penalty must be in [-2, 2]");
  if (penalty_last_n < -1) return bad("penalty_last_n must be >= -1");
  for (const auto& [token, bias] : logit_bias)
    if (!std::isfinite(bias) || bias < -100 || bias > 100) return bad("logit_bias values must be in [-100, 100]");
  return {};
}

uint64_t choice_seed(uint64_t seed, int32_t index) {
  if (index == 0) return seed;
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (params_.grammar) grammar_state_ = params_.grammar->start();
}

void Sampler::accept(int32_t token) { grammar_state_ = grammar_after(grammar_state_, token); }

GrammarState Sampler::grammar_after(const GrammarState& state, int32_t token) const {
  return params_.grammar ? params_.grammar->advance(state, token) : state;
}

bool Sampler::grammar_finished() const {
  return params_.grammar && params_.grammar->complete(grammar_state_) && !grammar_can_continue(grammar_state_);
}

double TokenDistribution::probability(int32_t token) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == token) return weights[i] / total;
  return 0;
}

int32_t Sampler::sample(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) {
  const TokenDistribution d = distribution(logits, n_vocab, history);
  return d.ids.empty() ? -1 : draw(d);
}

TokenDistribution Sampler::distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history) const {
  return distribution(logits, n_vocab, history, grammar_state_);
}

TokenDistribution Sampler::distribution(float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
                                        const GrammarState& grammar_state) const {
  const SamplingParams& p = params_;
  TokenDistribution d;
  // 0. The grammar's mask, then logit bias.
  if (p.grammar) {
    p.grammar->mask(grammar_state, logits, n_vocab);
    if (*std::max_element(logits, logits + n_vocab) == -std::numeric_limits<float>::infinity()) return d;  // blocked
  }
  for (const auto& [token, bias] : p.logit_bias)
    if (token >= 0 && token < n_vocab) logits[token] += bias;
  // 1. Penalties over the recent window.
  if (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    const size_t window = p.penalty_last_n < 0 ? history.size() : std::min<size_t>(history.size(), p.penalty_last_n);
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [token, count] : counts) {
      if (token < 0 || token >= n_vocab) continue;
      float& l = logits[token];
      l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
      l -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    }
  }
  // 2. Greedy: all the mass on the first highest logit.
  if (p.temperature <= 0) {
    d.ids = {static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits)};
    d.weights = {1.0};
    d.total = 1.0;
    return d;
  }

  // 3. Candidates sorted by logit (top-k first so the sort is partial).
  std::vector<int32_t>& ids = d.ids;  // [n_candidates]
  ids.resize(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  size_t n = ids.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) n = static_cast<size_t>(p.top_k);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  ids.resize(n);
  // 4. Softmax with temperature.
  std::vector<double>& probs = d.weights;  // [n_candidates]
  probs.resize(n);
  const double max = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (probs[i] = std::exp((logits[ids[i]] - max) / p.temperature));
  for (auto& x : probs) x /= sum;
  while (n > 1 && probs[n - 1] == 0) --n;  // banned tokens (-infinity) are never candidates
  // 5. min-p: drop candidates below min_p * top probability.
  if (p.min_p > 0) {
    size_t keep = 1;
    while (keep < n && probs[keep] >= p.min_p * probs[0]) ++keep;
    n = keep;
  }
  // 6. top-p: smallest prefix whose mass reaches top_p.
  if (p.top_p < 1) {
    double mass = 0;
    size_t keep = 0;
    while (keep < n) {
      mass += probs[keep++];
      if (mass >= p.top_p) break;
    }
    n = keep;
  }
  ids.resize(n);
  probs.resize(n);
  for (size_t i = 0; i < n; ++i) d.total += probs[i];
  return d;
}

int32_t Sampler::draw(const TokenDistribution& d) {
  if (greedy()) return d.ids[0];  // no RNG use, as sampling at temperature 0 never drew
  const double r = std::uniform_real_distribution<double>(0.0, d.total)(rng_);
  double acc = 0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    acc += d.weights[i];
    if (r < acc) return d.ids[i];
  }
  return d.ids.back();
}

int32_t Sampler::draw_draft(float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
                            GrammarState& grammar_state, std::vector<TokenDistribution>& dists) {
  TokenDistribution d = distribution(logits, n_vocab, history, grammar_state);
  if (d.ids.empty()) return -1;
  const int32_t token = draw(d);
  dists.push_back(std::move(d));
  grammar_state = grammar_after(grammar_state, token);
  return token;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

}  // namespace kestrel
