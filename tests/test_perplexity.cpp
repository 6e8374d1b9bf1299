// Perplexity and KL divergence: chunking and scoring as llama-perplexity does, the statistics against hand
// values, and `kestrel perplexity` end to end on stories260K: a base file written and compared against
// (KLD 0 with the same KV type, small but non-zero with BF16 KV), and bad base files refused clearly.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/perplexity.h"
#include "stories_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Perplexity, ChunksAreWholeAndStartWithBos) {
  const std::vector<int32_t> t = test::iota_tokens(23, 10);
  const auto chunks = perplexity_chunks(t, 8, 1);
  ASSERT_EQ(chunks.size(), 2u);  // 23 tokens: two whole chunks of 8, the rest dropped
  EXPECT_EQ(chunks[0], (std::vector<int32_t>{1, 11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(chunks[1][0], 1);
  EXPECT_EQ(chunks[1][1], 19);
  EXPECT_EQ(perplexity_chunks(t, 8, -1)[1][0], 18);
  EXPECT_TRUE(perplexity_chunks(t, 24, 1).empty());
  EXPECT_EQ(first_scored_token(8), 5);
  EXPECT_EQ(scored_per_chunk(8), 3);
}

TEST(Perplexity, StatisticsMatchHandValues) {
  const float logits[3] = {1.0f, 2.0f, 3.0f};
  float lp[3];
  log_softmax(logits, 3, lp);
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(lp[i], logits[i] - z, 1e-6);

  PerplexityStats p;
  p.add(std::log(2.0));
  p.add(std::log(8.0));
  EXPECT_NEAR(p.perplexity(), 4.0, 1e-9);  // exp(mean(ln 2, ln 8))
  EXPECT_GT(p.perplexity_error(), 0);

  // KL([0.5, 0.5] || [0.25, 0.75]) = 0.5 ln 2 + 0.5 ln(2/3).
  const float base[2] = {std::log(0.5f), std::log(0.5f)}, test[2] = {std::log(0.25f), std::log(0.75f)};
  KlDivergenceStats k;
  k.add(base, test, 2);
  EXPECT_NEAR(k.mean(), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-6);
  k.add(base, base, 2);
  EXPECT_NEAR(k.percentile(0), 0.0, 1e-9);
  EXPECT_NEAR(k.top1_agreement(), 0.5, 1e-9);  // argmax 0 vs 1, then equal
  EXPECT_EQ(k.count(), 2);
}

std::string kestrel_cmd(const std::string& args) { return std::string(KESTREL_BINARY) + " " + args; }

TEST(Perplexity, CommandWritesABaseAndComparesAgainstIt) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const std::string text = test::temp_path("ppl.txt"), base = test::temp_path("ppl.kpb");
  {
    std::ofstream out(text);
    for (int i = 0; i < 12; ++i)
      out << "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
             "One day, she saw a big dog in the park and wanted to be its friend. ";
  }
  std::string out;
  ASSERT_EQ(test::run_command(kestrel_cmd("perplexity -m " + model + " -f " + text + " -c 128 --kl-divergence-base " +
                                          base + " --cache-type-k f32 2>&1"), out), 0) << out;
  const size_t at = out.find("Final estimate: PPL = ");
  ASSERT_NE(at, std::string::npos) << out;
  const double ppl = std::stod(out.substr(at + 22));
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 20.0);  // the model knows this text's kind
  const auto stat = [](const std::string& s, const std::string& key) {
    const size_t p = s.find(key);
    return p == std::string::npos ? -1.0 : std::stod(s.substr(p + key.size()));
  };
  ASSERT_EQ(test::run_command(kestrel_cmd("perplexity -m " + model + " --kl-divergence-base " + base +
                                          " --kl-divergence --cache-type-k f32 2>&1"), out), 0) << out;
  EXPECT_EQ(stat(out, "Mean KLD: "), 0.0) << out;
  EXPECT_EQ(stat(out, "Same top p: "), 100.0) << out;
  ASSERT_EQ(test::run_command(kestrel_cmd("perplexity -m " + model + " --kl-divergence-base " + base +
                                          " --kl-divergence --cache-type-k bf16 2>&1"), out), 0) << out;
  EXPECT_GT(stat(out, "Mean KLD: "), 0.0) << out;
  EXPECT_LT(stat(out, "Mean KLD: "), 1e-2) << out;
  EXPECT_GT(stat(out, "Same top p: "), 90.0) << out;

  // A truncated base file, and a file that is not one, are refused with a message.
  std::filesystem::resize_file(base, std::filesystem::file_size(base) - 100);
  EXPECT_NE(test::run_command(kestrel_cmd("perplexity -m " + model + " --kl-divergence-base " + base + " --kl-divergence 2>&1"), out), 0);
  EXPECT_NE(out.find("truncated"), std::string::npos) << out;
  EXPECT_NE(test::run_command(kestrel_cmd("perplexity -m " + model + " --kl-divergence-base " + text + " --kl-divergence 2>&1"), out), 0);
  EXPECT_NE(out.find("not a kestrel perplexity base file"), std::string::npos) << out;
  EXPECT_NE(test::run_command(kestrel_cmd("perplexity -m " + model + " -f " + text + " -c 100000 2>&1"), out), 0);
  EXPECT_NE(out.find("fewer than one chunk"), std::string::npos) << out;
  std::filesystem::remove(text);
  std::filesystem::remove(base);
}

}  // namespace
}  // namespace kestrel
