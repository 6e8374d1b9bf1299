// Random texts under a grammar constraint, for tests that check what a grammar admits.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sample/grammar_constraint.h"
#include "sample/grammar_matcher.h"

namespace kestrel::test {

// Draws a text under the constraint over `vocab`, whose token 0 is the end token: each step a uniformly
// random allowed token other than the end, until the text is complete. nullopt if the grammar blocks every
// token first or the text is not complete within max_steps.
inline std::optional<std::string> random_grammar_text(const GrammarConstraint& c, const std::vector<std::string>& vocab,
                                                      std::mt19937& rng, int max_steps) {
  GrammarState s = c.start();
  std::string text;
  std::vector<float> logits(vocab.size());  // [vocab] 0 where allowed
  std::vector<int32_t> allowed;
  for (int step = 0; step < max_steps; ++step) {
    if (c.complete(s)) return text;
    std::fill(logits.begin(), logits.end(), 0.0f);
    c.mask(s, logits.data(), static_cast<int32_t>(vocab.size()));
    allowed.clear();
    for (size_t t = 1; t < vocab.size(); ++t)
      if (logits[t] == 0.0f) allowed.push_back(static_cast<int32_t>(t));
    if (allowed.empty()) return std::nullopt;
    const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    text += vocab[static_cast<size_t>(t)];
    s = c.advance(s, t);
  }
  if (c.complete(s)) return text;
  return std::nullopt;
}

}  // namespace kestrel::test
