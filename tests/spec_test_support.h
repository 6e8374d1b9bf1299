// Speculative decoding test support: a small (target, draft) pair as `kestrel make-model --draft-output`
// writes it, and a two-sample chi-square test of equal token distributions.
#pragma once
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/model_maker.h"
#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "test_support.h"

namespace kestrel::test {

// P(X >= x) for X ~ chi-square with k degrees of freedom: the regularized upper incomplete gamma Q(k/2, x/2)
// (series below a + 1, continued fraction above).
inline double chi_square_survival(double x, int k) {
  const double a = k / 2.0, z = x / 2.0;
  if (z <= 0) return 1.0;
  const double log_front = a * std::log(z) - z - std::lgamma(a);
  if (z < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000; ++n) sum += (term *= z / (a + n));
    return 1.0 - sum * std::exp(log_front);
  }
  double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    c = b + an / c;
    d = 1 / d;
    h *= d * c;
  }
  return std::exp(log_front) * h;
}

// Two-sample chi-square test of equal distributions; bins with fewer than 10 counts together are pooled.
inline double same_distribution_p_value(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<double, double>> bins;
  for (const auto& [k, n] : a) bins[k].first += n;
  for (const auto& [k, n] : b) bins[k].second += n;
  std::vector<std::pair<double, double>> merged;
  std::pair<double, double> pool{0, 0};
  for (const auto& [k, ab] : bins) {
    if (ab.first + ab.second < 10) {
      pool.first += ab.first, pool.second += ab.second;
      continue;
    }
    merged.push_back(ab);
  }
  if (pool.first + pool.second > 0) merged.push_back(pool);
  double na = 0, nb = 0;
  for (const auto& [x, y] : merged) na += x, nb += y;
  double stat = 0;
  for (const auto& [x, y] : merged) {
    const double t = x + y, ea = t * na / (na + nb), eb = t * nb / (na + nb);
    stat += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  return chi_square_survival(stat, static_cast<int>(merged.size()) - 1);
}

// A (target, draft) pair as `kestrel make-model --draft-output` writes it, small enough for many runs.
struct Pair {
  std::unique_ptr<Model> target, draft, poor_draft;
  Pair() {
    MakeModelOptions o;
    o.shape.n_embd = 64;
    o.shape.n_layers = 3;
    o.shape.n_heads = 4;
    o.shape.n_kv_heads = 2;
    o.shape.n_ff = 128;
    o.shape.n_vocab = 300;
    o.weight_type = "q8_0";
    o.perturb_from_layer = 1;
    o.perturb_scale = 0.03f;
    target = load(o, "spec-target");
    MakeModelOptions d = o;
    d.shape.n_layers = 1;
    d.perturb_from_layer = -1;
    draft = load(d, "spec-draft");
    d.seed = 1234;  // unrelated weights: a drafter that is mostly wrong
    poor_draft = load(d, "spec-poor-draft");
  }
  static std::unique_ptr<Model> load(const MakeModelOptions& o, const std::string& name) {
    const std::string path = test::temp_path(name + ".gguf");
    EXPECT_TRUE(make_model(o, path).ok());
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << m.error();
    std::filesystem::remove(path);
    return m.ok() ? std::move(m).value() : nullptr;
  }
};

// A grammar over a synthetic vocabulary of the pair's 300 tokens (token 0 is the end, the others one or two
// characters of "{},abcde0123456789xyz"): a braced list of 1-6 short items. Most tokens are never allowed,
// so drafts are rejected for the grammar's sake as well as the target's.
struct PairGrammar {
  std::vector<std::string> pieces;  // [300]
  std::shared_ptr<const GrammarConstraint> constraint;
  PairGrammar() {
    const std::string alphabet = "{},abcde0123456789xyz";
    pieces.emplace_back();
    for (size_t t = 1; t < 300; ++t) {
      std::string piece(1, alphabet[t % alphabet.size()]);
      if (t >= 100) piece += alphabet[(t / alphabet.size()) % alphabet.size()];
      pieces.push_back(piece);
    }
    auto g = parse_grammar("root ::= \"{\" item (\",\" item){0,5} \"}\"\nitem ::= [a-e] [a-e0-9]{0,3}\n");
    EXPECT_TRUE(g.ok()) << g.error();
    if (g.ok())
      constraint = std::make_shared<GrammarConstraint>(std::move(g).value(), std::make_shared<TokenTrie>(pieces),
                                                       std::vector<int32_t>{0});
  }
  // The text of generated tokens (the end token spells nothing).
  std::string text(const std::vector<int32_t>& tokens) const {
    std::string out;
    for (int32_t t : tokens) out += pieces.at(static_cast<size_t>(t));
    return out;
  }
  static bool matches(const std::string& text) {
    return std::regex_match(text, std::regex("\\{[a-e][a-e0-9]{0,3}(,[a-e][a-e0-9]{0,3}){0,5}\\}"));
  }
};

}  // namespace kestrel::test
