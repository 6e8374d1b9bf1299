#include "spec/verify.h"

#include <algorithm>
#include <cassert>

namespace kestrel {
namespace {

// normalize(max(0, p - q)) over p's candidates (outside them p is 0).
TokenDistribution residual(const TokenDistribution& p, const TokenDistribution* q, int32_t drafted) {
  TokenDistribution r;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double q_i = q ? q->probability(p.ids[i]) : (p.ids[i] == drafted ? 1.0 : 0.0);
    const double w = p.weights[i] / p.total - q_i;
    if (w <= 0) continue;
    r.ids.push_back(p.ids[i]);
    r.weights.push_back(w);
    r.total += w;
  }
  return r;
}

}  // namespace

Verification verify_drafts(std::span<const int32_t> drafts, std::span<const TokenDistribution> draft_dists,
                           float* target_logits, int32_t n_vocab, std::vector<int32_t> history, Sampler& sampler) {
  assert(draft_dists.empty() || draft_dists.size() == drafts.size());
  const size_t row = static_cast<size_t>(n_vocab);
  GrammarState grammar = sampler.grammar_state();  // after the accepted text and the drafts kept so far
  for (size_t i = 0; i < drafts.size(); ++i) {
    const TokenDistribution p = sampler.distribution(target_logits + i * row, n_vocab, history, grammar);
    if (p.ids.empty()) return {static_cast<int32_t>(i), -1};
    const int32_t x = drafts[i];
    const TokenDistribution* q = draft_dists.empty() ? nullptr : &draft_dists[i];
    bool keep;
    if (sampler.greedy()) {
      keep = p.ids[0] == x;
    } else {
      const double q_x = q ? q->probability(x) : 1.0;
      keep = q_x > 0 && sampler.uniform() * q_x < p.probability(x);  // u < min(1, p(x) / q(x))
    }
    if (!keep) {
      if (sampler.greedy()) return {static_cast<int32_t>(i), p.ids[0]};
      const TokenDistribution r = residual(p, q, x);
      // An empty residual (p <= q everywhere, so p == q) has probability zero of a rejection: draw from p.
      return {static_cast<int32_t>(i), sampler.draw(r.ids.empty() ? p : r)};
    }
    history.push_back(x);
    grammar = sampler.grammar_after(grammar, x);
  }
  const TokenDistribution bonus = sampler.distribution(target_logits + drafts.size() * row, n_vocab, history, grammar);
  return {static_cast<int32_t>(drafts.size()), bonus.ids.empty() ? -1 : sampler.draw(bonus)};
}

}  // namespace kestrel
