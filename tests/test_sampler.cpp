// Sampling: each filter does what it says, and the same seed gives the same tokens.
#include <map>

#include "sample/sampler.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

std::map<int32_t, int> draw_many(const SamplingParams& p, const std::vector<float>& logits, int n,
                                 const std::vector<int32_t>& history = {}) {
  Sampler s(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++counts[s.sample(l.data(), static_cast<int32_t>(l.size()), history)];
  }
  return counts;
}

TEST(Sampler, GreedyPicksArgmax) {
  auto l = logits_of({0.1f, 2.0f, -1.0f, 1.9f});
  Sampler s(test::top_p_sampling(0));
  EXPECT_EQ(s.sample(l.data(), 4, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  const auto l = logits_of({1.0f, 1.1f, 0.9f, 1.05f, 0.5f});
  SamplingParams p = test::top_p_sampling(1.0f);
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    auto la = l, lb = l;
    ta.push_back(a.sample(la.data(), 5, {}));
    tb.push_back(b.sample(lb.data(), 5, {}));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 99;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) {
    auto lc = l;
    tc.push_back(c.sample(lc.data(), 5, {}));
  }
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TemperatureFollowsSoftmax) {
  // logits log(1), log(3): probabilities 1/4, 3/4 at temperature 1.
  const auto counts = draw_many(test::top_p_sampling(1.0f), logits_of({0.0f, std::log(3.0f)}), 20000);
  EXPECT_NEAR(counts.at(1) / 20000.0, 0.75, 0.02);
}

TEST(Sampler, TopKKeepsOnlyK) {
  SamplingParams p = test::top_p_sampling(1.0f);
  p.top_k = 2;
  const auto counts = draw_many(p, logits_of({3.0f, 2.9f, 2.8f, 2.7f}), 2000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_TRUE(counts.count(0) && counts.count(1));
}

TEST(Sampler, TopPKeepsSmallestSufficientSet) {
  SamplingParams p = test::top_p_sampling(1.0f);
  p.top_p = 0.7f;  // probabilities 0.5, 0.3, 0.2 -> keep the first two
  const auto counts = draw_many(p, logits_of({std::log(0.5f), std::log(0.3f), std::log(0.2f)}), 4000);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_NEAR(counts.at(0) / 4000.0, 0.5 / 0.8, 0.03);
}

TEST(Sampler, MinPDropsUnlikely) {
  SamplingParams p = test::top_p_sampling(1.0f);
  p.min_p = 0.5f;  // keep tokens with p >= 0.5 * p_max
  const auto counts = draw_many(p, logits_of({std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.15f)}), 4000);
  EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
  EXPECT_EQ(counts.size(), 2u);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  SamplingParams p = test::top_p_sampling(0);
  p.repeat_penalty = 2.0f;
  auto l = logits_of({1.0f, 0.8f});
  Sampler s(p);
  EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);  // 1.0 / 2 < 0.8
  p = test::top_p_sampling(0);
  p.frequency_penalty = 0.15f;
  Sampler f(p);
  l = logits_of({1.0f, 0.8f});
  EXPECT_EQ(f.sample(l.data(), 2, {0}), 0);  // one occurrence: 0.85 > 0.8
  l = logits_of({1.0f, 0.8f});
  EXPECT_EQ(f.sample(l.data(), 2, {0, 0}), 1);  // two: 0.7 < 0.8
  p = test::top_p_sampling(0);
  p.presence_penalty = 0.3f;
  Sampler pr(p);
  l = logits_of({1.0f, 0.8f});
  EXPECT_EQ(pr.sample(l.data(), 2, {0}), 1);
  p = test::top_p_sampling(0);
  p.repeat_penalty = 2.0f;
  p.penalty_last_n = 1;  // only the last token counts
  Sampler w(p);
  l = logits_of({1.0f, 0.8f});
  EXPECT_EQ(w.sample(l.data(), 2, {0, 1}), 0);
}

TEST(Sampler, ValidateRejectsBadValues) {
  SamplingParams p;
  EXPECT_TRUE(p.validate().ok());
  p.temperature = -1;
  EXPECT_FALSE(p.validate().ok());
  p = SamplingParams{};
  p.top_p = 0;
  EXPECT_FALSE(p.validate().ok());
  p = SamplingParams{};
  p.min_p = 2;
  EXPECT_FALSE(p.validate().ok());
  p = SamplingParams{};
  p.repeat_penalty = 0;
  EXPECT_FALSE(p.validate().ok());
  p = SamplingParams{};
  p.temperature = NAN;
  EXPECT_FALSE(p.validate().ok());
}

}  // namespace
}  // namespace kestrel
