// Embeddings (engine/embedder.h) on real models: a text's vector is the same alone and in a batch of 16
// (and in passes of any size), unit length; Last pooling is the final hidden state the output
// matrix turns into the next-token logits, Mean the average of every prefix's Last, CLS the first's; bad
// input is refused.
#include <cmath>
#include <filesystem>

#include "engine/embedder.h"
#include "engine/generator.h"
#include "io/gguf.h"
#include "quant/quantize.h"
#include "stories_model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

class EmbedderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = test::shared_dir();
    if (shared_.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
    test::load_stories(shared_, model_, tokenizer_);
  }

  std::vector<std::vector<int32_t>> texts() const {
    const char* kTexts[] = {"Once upon a time, there was a little girl named Lily.",
                            "The cat sat on the mat.",
                            "One day, a big dog came to the park and barked at the birds in the tall green trees.",
                            "Tom and Sue went to the beach. They saw a big wave.",
                            "Hi",
                            "Lily liked to play with her ball in the garden every morning before school."};
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < 16; ++i) {
      std::string t = kTexts[i % 6];
      for (int k = 0; k < i / 6; ++k) t += std::string(" ") + kTexts[(i + k) % 6];  // some longer ones
      out.push_back(tokenizer_->encode(t, true));
    }
    return out;
  }

  std::string shared_;
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

void expect_identical(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " elements differ";
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

void expect_identical_alone_and_batched(const Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& inputs) {
  for (Pooling pooling : {Pooling::Last, Pooling::Mean, Pooling::Cls}) {
    SCOPED_TRACE(pooling_name(pooling));
    EmbedderConfig config;
    config.pooling = pooling;
    std::vector<std::vector<float>> alone;
    Embedder single(model, pool, config);
    for (const auto& in : inputs) {
      auto v = single.embed(std::span(&in, 1));
      ASSERT_TRUE(v.ok()) << v.error();
      ASSERT_EQ(v->size(), 1u);
      EXPECT_NEAR(norm(v->front()), 1.0, 1e-5);
      alone.push_back(std::move(v->front()));
    }
    Embedder batched(model, pool, config);
    auto all = batched.embed(inputs);
    ASSERT_TRUE(all.ok()) << all.error();
    ASSERT_EQ(all->size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) expect_identical((*all)[i], alone[i], "input " + std::to_string(i));
    // Passes shorter than the inputs: chunks over the KV of the earlier ones give nearly the same vector.
    config.max_batch_tokens = 7;
    Embedder chunked(model, pool, config);
    auto parts = chunked.embed(inputs);
    ASSERT_TRUE(parts.ok()) << parts.error();
    for (size_t i = 0; i < inputs.size(); ++i)
      for (size_t e = 0; e < alone[i].size(); ++e) ASSERT_NEAR((*parts)[i][e], alone[i][e], 2e-3) << i << " " << e;
  }
}

TEST_F(EmbedderTest, ATextsVectorIsTheSameAloneAndInABatchOf16) {
  expect_identical_alone_and_batched(*model_, pool_, texts());
}

// The packed integer and float GEMM paths too (different kernels for few and many rows).
TEST_F(EmbedderTest, QuantizedAndHalfModelsAreBatchInvariantToo) {
  for (const char* name : {"syn-llama-gqa-q4_0-pure", "syn-llama-gqa-q8_0-pure", "syn-llama-gqa-f16-pure",
                           "syn-llama-gqa-q4_k-pure", "syn-deepseek2-mla-f32", "syn-llama-gqa-f32"}) {
    SCOPED_TRACE(name);
    const std::string path = shared_ + "/reference/" + name + ".gguf";
    if (!std::filesystem::exists(path)) continue;
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok()) << model.error();
    std::vector<std::vector<int32_t>> inputs;
    const int32_t n_vocab = (*model)->hparams().n_vocab;
    for (int i = 0; i < 16; ++i) {
      std::vector<int32_t>& in = inputs.emplace_back();
      for (int t = 0; t < 3 + 5 * i; ++t) in.push_back((i * 131 + t * 17 + 1) % n_vocab);
    }
    expect_identical_alone_and_batched(**model, pool_, inputs);
  }
}

// Unnormalised Last pooling is the final-normalised hidden state: the output matrix times it gives the
// logits the generator computes for the next token.
TEST_F(EmbedderTest, LastPoolingIsTheHiddenStateBehindTheNextTokenLogits) {
  const auto input = texts()[2];
  EmbedderConfig config;
  config.normalize = false;
  Embedder embedder(*model_, pool_, config);
  auto v = embedder.embed(std::span(&input, 1));
  ASSERT_TRUE(v.ok()) << v.error();
  const std::vector<float>& h = v->front();

  Generator gen(*model_, pool_, GeneratorConfig{});
  auto logits = gen.eval(input, false);
  ASSERT_TRUE(logits.ok()) << logits.error();
  const TensorView& out = *model_->weights().output;
  const int E = model_->hparams().n_embd;
  std::vector<float> row(static_cast<size_t>(E));
  double max_err = 0, max_logit = 0;
  for (int r = 0; r < model_->hparams().n_vocab; ++r) {
    dequantize_row(out.type, out.row(r), row.data(), E);
    double z = 0;
    for (int e = 0; e < E; ++e) z += static_cast<double>(row[static_cast<size_t>(e)]) * h[static_cast<size_t>(e)];
    max_err = std::max(max_err, std::abs(z - (*logits)[static_cast<size_t>(r)]));
    max_logit = std::max(max_logit, std::abs(static_cast<double>((*logits)[static_cast<size_t>(r)])));
  }
  EXPECT_GT(max_logit, 1.0);
  EXPECT_LT(max_err, 1e-3 * max_logit);
}

// Causal attention: token t's hidden state is prefix t's last. Mean pooling averages them, CLS takes the first.
TEST_F(EmbedderTest, MeanAndClsPoolTheSameHiddenStatesAsEachPrefixsLast) {
  const auto input = texts()[0];
  EmbedderConfig config;
  config.normalize = false;
  std::vector<std::vector<int32_t>> prefixes;
  for (size_t n = 1; n <= input.size(); ++n) prefixes.emplace_back(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(n));
  Embedder last(*model_, pool_, config);
  auto lasts = last.embed(prefixes);
  ASSERT_TRUE(lasts.ok()) << lasts.error();
  config.pooling = Pooling::Mean;
  Embedder mean(*model_, pool_, config);
  config.pooling = Pooling::Cls;
  Embedder cls(*model_, pool_, config);
  auto m = mean.embed(std::span(&input, 1));
  auto c = cls.embed(std::span(&input, 1));
  ASSERT_TRUE(m.ok() && c.ok());
  const size_t E = static_cast<size_t>(model_->hparams().n_embd);
  for (size_t e = 0; e < E; ++e) {
    double avg = 0;
    for (const auto& l : *lasts) avg += l[e];
    avg /= static_cast<double>(lasts->size());
    EXPECT_NEAR(m->front()[e], avg, 1e-4 * (1 + std::abs(avg))) << e;
    EXPECT_NEAR(c->front()[e], lasts->front()[e], 1e-4 * (1 + std::abs(lasts->front()[e]))) << e;
  }
}

TEST_F(EmbedderTest, BadInputIsRefusedWithAReason) {
  EmbedderConfig config;
  config.max_input_tokens = 8;
  Embedder embedder(*model_, pool_, config);
  const std::vector<std::vector<int32_t>> empty = {{1, 2}, {}};
  auto r = embedder.embed(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("input 1: no tokens"), std::string::npos) << r.error();
  const std::vector<std::vector<int32_t>> too_long = {std::vector<int32_t>(9, 1)};
  r = embedder.embed(too_long);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("exceed"), std::string::npos) << r.error();
  const std::vector<std::vector<int32_t>> bad_id = {{1, model_->hparams().n_vocab}};
  r = embedder.embed(bad_id);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("outside the vocabulary"), std::string::npos) << r.error();
  EXPECT_FALSE(parse_pooling("max").ok());
  EXPECT_EQ(parse_pooling("cls").value(), Pooling::Cls);
  EXPECT_EQ(model_pooling(*model_), Pooling::Last);  // no pooling_type in a causal LM's metadata
  // Still works after refusals.
  const std::vector<std::vector<int32_t>> ok = {{1, 2, 3}};
  EXPECT_TRUE(embedder.embed(ok).ok());
}

}  // namespace
}  // namespace kestrel
