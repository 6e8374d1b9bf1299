// Key centers (model/key_centers.h): measured on a real model, they bring quantized keys of a real text much
// closer to the float keys; they are set only where they apply.
#include <cmath>
#include <filesystem>
#include <numeric>

#include "model/key_centers.h"
#include "model/model_maker.h"
#include "stories_model.h"
#include "test_support.h"

namespace kestrel {
namespace {

// Every layer's keys of `tokens` (one sequence from position 0) as the cache hands them back:
// [n_layers][n_tok][n_kv_heads][k_dim].
std::vector<float> cached_keys(const Model& model, ThreadPool& pool, KvStorage& kv, const std::vector<int32_t>& tokens) {
  const KvCacheSpec& spec = kv.spec();
  const int n = static_cast<int>(tokens.size());
  std::vector<int32_t> positions(tokens.size()), pages(static_cast<size_t>(spec.n_blocks));
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(pages.begin(), pages.end(), 0);
  const std::vector<const int32_t*> tables(tokens.size(), pages.data());
  const int32_t last = n - 1;
  std::vector<float> logits(static_cast<size_t>(model.hparams().n_vocab));
  model.forward(pool, ModelInput{tokens, positions, tables, std::span<const int32_t>(&last, 1)}, kv, logits.data());
  std::vector<float> keys;
  std::vector<float> row(static_cast<size_t>(spec.k_dim));
  for (int il = 0; il < spec.n_layers; ++il) {
    const KvLayerView view = kv.layer(il);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < spec.n_kv_heads; ++h) {
        view.read_k(pages[t / spec.block_size], h, t % spec.block_size, row.data());
        keys.insert(keys.end(), row.begin(), row.end());
      }
  }
  return keys;
}

double squared_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return d;
}

// stories260K (a real model) and a pool; skipped without ../shared.
class KeyCenters : public ::testing::Test {
 protected:
  void SetUp() override {
    KESTREL_REQUIRE_SHARED(shared);
    test::load_stories(shared, model, tokenizer);
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ThreadPool pool{2};
};

TEST_F(KeyCenters, BringQuantizedKeysOfARealModelCloser) {
  const HParams& hp = model->hparams();
  const std::vector<float> centers = measure_key_centers(*model, pool);
  ASSERT_EQ(centers.size(), static_cast<size_t>(hp.n_layers) * hp.n_kv_heads * hp.head_dim);
  for (float c : centers) ASSERT_TRUE(std::isfinite(c));
  EXPECT_EQ(measure_key_centers(*model, pool), centers);  // deterministic

  const auto tokens = tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play in the park with her mom. "
      "One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high. Her mom "
      "smiled and said, \"Good job, Lily!\" They played all day until the sun went down, and then they went "
      "home to eat dinner together. Lily was very happy.",
      true);
  const int32_t n_blocks = static_cast<int32_t>((tokens.size() + 15) / 16);
  KvStorage exact_kv(model->kv_spec(n_blocks, 16, KvType::F32));
  const std::vector<float> exact = cached_keys(*model, pool, exact_kv, tokens);
  for (KvType t : {KvType::Q8_0, KvType::Q4_0, KvType::TQ4, KvType::TQ3}) {
    SCOPED_TRACE(kv_type_name(t));
    KvStorage plain(model->kv_spec(n_blocks, 16, t)), centered(model->kv_spec(n_blocks, 16, t));
    center_keys(centered, centers);
    ASSERT_TRUE(centered.keys_centered());
    const double plain_err = squared_distance(cached_keys(*model, pool, plain, tokens), exact);
    const double centered_err = squared_distance(cached_keys(*model, pool, centered, tokens), exact);
    std::printf("%s keys: squared error %.4g uncentered, %.4g centered (%.2fx)\n", kv_type_name(t), plain_err,
                centered_err, plain_err / centered_err);
    EXPECT_LT(centered_err, 0.5 * plain_err);
  }
}

TEST_F(KeyCenters, OnlyQuantizedKeysOfSeparateKeyCachesAreCentered) {
  KvStorage f16(model->kv_spec(4, 16, KvType::F16)), q8_v(model->kv_spec(4, 16, {KvType::F16, KvType::Q8_0}));
  KvStorage q4(model->kv_spec(4, 16, {KvType::Q4_0, KvType::F16}));
  center_keys(f16, *model, pool);
  center_keys(q8_v, *model, pool);
  center_keys(q4, *model, pool);
  EXPECT_FALSE(f16.keys_centered());
  EXPECT_FALSE(q8_v.keys_centered());
  EXPECT_TRUE(q4.keys_centered());
  EXPECT_THROW(q4.set_key_centers(std::vector<float>(7)), std::invalid_argument);

  // Latent attention caches its value inside the key row: no centers.
  MakeModelOptions options;
  options.shape.arch = "deepseek2";
  options.shape.n_embd = 256;
  options.shape.n_ff = 256;
  const std::string path = test::temp_path("key-centers-mla.gguf");
  const Status made = make_model(options, path);
  ASSERT_TRUE(made.ok()) << made.error();
  auto mla = Model::load(path);
  ASSERT_TRUE(mla.ok()) << mla.error();
  EXPECT_TRUE(measure_key_centers(*mla.value(), pool).empty());
  KvStorage latent(mla.value()->kv_spec(4, 16, KvType::Q8_0));
  center_keys(latent, *mla.value(), pool);
  EXPECT_FALSE(latent.keys_centered());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kestrel
