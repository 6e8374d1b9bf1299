// Speculative decoding: n-gram drafts, the verification math (greedy and rejection sampling, checked by a
// chi-square test against the target's own distribution, with a poor drafter so rejections happen), and
// generation with a draft model or n-gram drafts giving the target's tokens exactly (greedy) or its
// distribution (sampling).
#include <map>
#include <random>

#include "engine/speculative_generator.h"
#include "spec/ngram_drafter.h"
#include "spec/verify.h"
#include "spec_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::chi_square_survival;
using test::Pair;
using test::same_distribution_p_value;

TEST(Speculative, ChiSquareSurvivalMatchesKnownValues) {
  EXPECT_NEAR(chi_square_survival(3.841, 1), 0.05, 1e-3);
  EXPECT_NEAR(chi_square_survival(18.307, 10), 0.05, 1e-3);
  EXPECT_NEAR(chi_square_survival(124.342, 100), 0.05, 1e-3);
}

TEST(Speculative, NgramDraftsContinueTheLatestEarlierOccurrence) {
  const std::vector<int32_t> t{1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3};
  EXPECT_EQ(ngram_draft(t, 3, 2), (std::vector<int32_t>{5, 6}));  // "1 2 3" last seen before "5 6 7"
  EXPECT_EQ(ngram_draft(t, 3, 10), (std::vector<int32_t>{5, 6, 7, 1, 2, 3}));
  const std::vector<int32_t> u{4, 8, 4, 7, 8};
  EXPECT_EQ(ngram_draft(u, 3, 2), (std::vector<int32_t>{4, 7}));  // only the 1-gram "8" occurred before
  EXPECT_TRUE(ngram_draft(std::vector<int32_t>{1, 2, 3}, 2, 4).empty());
  EXPECT_TRUE(ngram_draft(std::vector<int32_t>{1}, 2, 4).empty());
}

// Rows of fixed random logits over a small vocabulary (the target) and a deliberately different drafter.
struct Toy {
  static constexpr int32_t kVocab = 12;
  std::vector<float> target;  // [K + 1, kVocab]
  std::vector<float> draft;   // [K, kVocab]
  Toy(int k, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.5f);
    for (int i = 0; i < (k + 1) * kVocab; ++i) target.push_back(n(rng));
    for (int i = 0; i < k * kVocab; ++i) draft.push_back(n(rng));
  }
};

// The first token emitted after the drafts are verified (a kept draft or the replacement) is distributed
// as the target's first row, whatever the drafter proposes.
TEST(Speculative, RejectionSamplingKeepsTheTargetDistribution) {
  for (const float temperature : {0.7f, 1.0f}) {
    for (const float top_p : {1.0f, 0.9f}) {
      SamplingParams params = test::top_p_sampling(temperature, top_p);
      const int k = 3;
      const Toy toy(k, 7);
      std::map<int32_t, int> with_spec, plain;  // the first token after verification, and without drafts
      Sampler spec_sampler(params), draft_sampler([&] { SamplingParams q = params; q.seed = 99; return q; }()),
          plain_sampler([&] { SamplingParams q = params; q.seed = 5; return q; }());
      int64_t rejected = 0;
      for (int trial = 0; trial < 20000; ++trial) {
        std::vector<int32_t> drafts;
        std::vector<TokenDistribution> dists;
        for (int i = 0; i < k; ++i) {
          std::vector<float> row(toy.draft.begin() + i * Toy::kVocab, toy.draft.begin() + (i + 1) * Toy::kVocab);
          dists.push_back(draft_sampler.distribution(row.data(), Toy::kVocab, {}));
          drafts.push_back(draft_sampler.draw(dists.back()));
        }
        std::vector<float> rows = toy.target;
        const Verification v = verify_drafts(drafts, dists, rows.data(), Toy::kVocab, {}, spec_sampler);
        ++with_spec[v.n_accepted > 0 ? drafts[0] : v.next];
        rejected += v.n_accepted == 0;
        std::vector<float> r0(toy.target.begin(), toy.target.begin() + Toy::kVocab);
        ++plain[plain_sampler.sample(r0.data(), Toy::kVocab, {})];
      }
      EXPECT_GT(rejected, 2000);  // a poor drafter
      EXPECT_GT(same_distribution_p_value(with_spec, plain), 0.001) << "T " << temperature << " top-p " << top_p;
    }
  }
}

TEST(Speculative, GreedyVerificationKeepsDraftsWhileTheyAreTheTargetsChoice) {
  SamplingParams params;
  params.temperature = 0;
  Sampler sampler(params);
  const Toy toy(3, 11);
  std::vector<int32_t> argmax;
  for (int i = 0; i < 4; ++i)
    argmax.push_back(static_cast<int32_t>(std::max_element(toy.target.begin() + i * Toy::kVocab,
                                                           toy.target.begin() + (i + 1) * Toy::kVocab) -
                                          (toy.target.begin() + i * Toy::kVocab)));
  std::vector<float> rows = toy.target;
  Verification v = verify_drafts(std::vector<int32_t>{argmax[0], argmax[1], argmax[2]}, {}, rows.data(), Toy::kVocab, {}, sampler);
  EXPECT_EQ(v.n_accepted, 3);
  EXPECT_EQ(v.next, argmax[3]);  // the bonus token
  rows = toy.target;
  v = verify_drafts(std::vector<int32_t>{argmax[0], (argmax[1] + 1) % Toy::kVocab, argmax[2]}, {}, rows.data(),
                    Toy::kVocab, {}, sampler);
  EXPECT_EQ(v.n_accepted, 1);
  EXPECT_EQ(v.next, argmax[1]);  // the correction
}

std::vector<int32_t> run_plain(Generator& g, const std::vector<int32_t>& prompt, int n, Sampler& sampler) {
  std::vector<int32_t> out;
  g.reset();
  EXPECT_TRUE(g.generate(prompt, n, sampler, {}, [&](int32_t t) { out.push_back(t); return true; }).ok());
  return out;
}

std::vector<int32_t> run_spec(SpeculativeGenerator& g, const std::vector<int32_t>& prompt, int n, Sampler& sampler) {
  std::vector<int32_t> out;
  EXPECT_TRUE(g.generate(prompt, n, sampler, {}, [&](int32_t t) { out.push_back(t); return true; }).ok());
  return out;
}

// Tokens 2..4 (drafted and verified; the first comes from the prompt's forward) of 20000 generations from
// one prompt, sampled with speculation and without (other seeds): the same distribution at each position
// (chi-square, p > 0.001), and rejections happened. A position past the text's end (a grammar that
// completed) counts as token -1.
void expect_sampled_tokens_follow_the_target(SpeculativeGenerator& spec, Generator& plain, SamplingParams params) {
  const std::vector<int32_t> prompt{1, 50, 60, 70};
  std::vector<std::map<int32_t, int>> with_spec(3), without(3);  // [position][token] counts
  const auto at = [](const std::vector<int32_t>& tokens, size_t i) { return i < tokens.size() ? tokens[i] : -1; };
  int64_t drafted = 0, accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    params.seed = static_cast<uint64_t>(trial);
    Sampler a(params);
    const std::vector<int32_t> s = run_spec(spec, prompt, 4, a);
    drafted += spec.stats().drafted;
    accepted += spec.stats().accepted;
    params.seed += 1u << 20;
    Sampler b(params);
    const std::vector<int32_t> p = run_plain(plain, prompt, 4, b);
    for (size_t i = 0; i < 3; ++i) ++with_spec[i][at(s, i + 1)], ++without[i][at(p, i + 1)];
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(same_distribution_p_value(with_spec[i], without[i]), 0.001) << "token " << i + 2;
  EXPECT_GT(drafted - accepted, 2000);  // rejections happened
  EXPECT_GT(accepted, 0);
}

TEST(Speculative, GreedyOutputIsTheTargetsTokenForToken) {
  const Pair pair;
  ASSERT_TRUE(pair.target && pair.draft && pair.poor_draft);
  ThreadPool pool(2);
  GeneratorConfig config;
  config.n_ctx = 256;
  Generator plain(*pair.target, pool, config);
  SamplingParams greedy;
  greedy.temperature = 0;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(3, 299);
  struct Setup {
    const Model* draft;
    SpeculativeConfig spec;
  };
  std::vector<Setup> setups;
  for (int k : {1, 4, 8}) setups.push_back({pair.draft.get(), {.draft_max = k}});
  setups.push_back({pair.poor_draft.get(), {.draft_max = 4}});
  for (int k : {2, 6}) setups.push_back({nullptr, {.draft_max = k, .ngram = 3}});
  setups.push_back({pair.draft.get(), {.draft_max = 5, .adaptive = false}});
  for (const Setup& s : setups) {
    auto spec = SpeculativeGenerator::create(*pair.target, s.draft, pool, config, s.spec);
    ASSERT_TRUE(spec.ok()) << spec.error();
    int64_t drafted = 0, accepted = 0;
    for (int prompt_i = 0; prompt_i < 50; ++prompt_i) {
      std::vector<int32_t> prompt(static_cast<size_t>(4 + prompt_i % 13));
      for (auto& t : prompt) t = token(rng);
      if (prompt_i % 3 == 0) prompt.insert(prompt.end(), prompt.begin(), prompt.end());  // repeats: n-gram hits
      Sampler a(greedy), b(greedy);
      ASSERT_EQ(run_spec(**spec, prompt, 40, a), run_plain(plain, prompt, 40, b)) << "prompt " << prompt_i;
      drafted += (*spec)->stats().drafted;
      accepted += (*spec)->stats().accepted;
    }
    EXPECT_GT(drafted, 0);
    if (s.draft == pair.draft.get()) {
      EXPECT_GT(accepted, drafted / 2);  // the pair's draft mostly agrees
    }
  }
}

TEST(Speculative, SampledTokensFollowTheTargetsDistribution) {
  const Pair pair;
  ASSERT_TRUE(pair.target && pair.poor_draft);
  ThreadPool pool(1);
  GeneratorConfig config;
  config.n_ctx = 32;
  Generator plain(*pair.target, pool, config);
  auto spec = SpeculativeGenerator::create(*pair.target, pair.poor_draft.get(), pool, config, {.draft_max = 3});
  ASSERT_TRUE(spec.ok());
  SamplingParams params = test::top_p_sampling(0.7f, 0.95f);
  params.repeat_penalty = 1.3f;  // the history, kept drafts included, shapes each position
  expect_sampled_tokens_follow_the_target(**spec, plain, params);
}

// Under a grammar, row i of a verification is masked by the grammar's state after the drafts before it:
// greedy output is the plain generator's token for token, with drafts the grammar does not allow rejected,
// and sampled tokens keep the plain generator's distribution.
TEST(Speculative, UnderAGrammarOutputIsThePlainGenerators) {
  const Pair pair;
  const test::PairGrammar grammar;
  ASSERT_TRUE(pair.target && pair.draft && pair.poor_draft && grammar.constraint);
  ThreadPool pool(2);
  GeneratorConfig config;
  config.n_ctx = 128;
  Generator plain(*pair.target, pool, config);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.grammar = grammar.constraint;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(3, 299);
  struct Setup {
    const Model* draft;
    SpeculativeConfig spec;
  };
  for (const Setup& s : {Setup{pair.draft.get(), {.draft_max = 4}}, Setup{pair.poor_draft.get(), {.draft_max = 4}},
                         Setup{nullptr, {.draft_max = 4, .ngram = 2}}}) {
    auto spec = SpeculativeGenerator::create(*pair.target, s.draft, pool, config, s.spec);
    ASSERT_TRUE(spec.ok()) << spec.error();
    int64_t drafted = 0, accepted = 0;
    for (int prompt_i = 0; prompt_i < 20; ++prompt_i) {
      std::vector<int32_t> prompt(static_cast<size_t>(4 + prompt_i % 7));
      for (auto& t : prompt) t = token(rng);
      Sampler a(greedy), b(greedy);
      const std::vector<int32_t> got = run_spec(**spec, prompt, 60, a);
      ASSERT_EQ(got, run_plain(plain, prompt, 60, b)) << "prompt " << prompt_i;
      EXPECT_TRUE(test::PairGrammar::matches(grammar.text(got))) << grammar.text(got);
      EXPECT_TRUE(a.grammar_finished());
      drafted += (*spec)->stats().drafted;
      accepted += (*spec)->stats().accepted;
    }
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0);
  }
  // Sampling, with a poor drafter: tokens 2..4 are drafted and verified.
  auto spec = SpeculativeGenerator::create(*pair.target, pair.poor_draft.get(), pool, config, {.draft_max = 3});
  ASSERT_TRUE(spec.ok());
  SamplingParams params = test::top_p_sampling(1.0f);
  params.grammar = grammar.constraint;
  expect_sampled_tokens_follow_the_target(**spec, plain, params);
}

TEST(Speculative, RefusesADraftWithAnotherVocabulary) {
  const Pair pair;
  MakeModelOptions o;
  o.shape.n_embd = 64;
  o.shape.n_layers = 1;
  o.shape.n_vocab = 320;
  const auto other = Pair::load(o, "spec-other-vocab");
  ThreadPool pool(1);
  auto spec = SpeculativeGenerator::create(*pair.target, other.get(), pool, GeneratorConfig{}, {});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.error().find("vocabulary"), std::string::npos);
  EXPECT_FALSE(SpeculativeGenerator::create(*pair.target, nullptr, pool, GeneratorConfig{}, {}).ok());
}

}  // namespace
}  // namespace kestrel
