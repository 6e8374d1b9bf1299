// Generated models of every architecture and weight type load, and their forward passes agree between one
// prefill and token-by-token decoding; load-time checks name what is wrong.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/generator.h"
#include "model/model_maker.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::string make(const MakeModelOptions& options, const std::string& name) {
  const std::string path = test::temp_path(name + ".gguf");
  const Status st = make_model(options, path);
  EXPECT_TRUE(st.ok()) << st.error();
  return path;
}

struct Case {
  std::string arch;
  std::string type;
  int n_expert;
  bool tied;
};

class GeneratedModels : public ::testing::TestWithParam<Case> {};

TEST_P(GeneratedModels, PrefillEqualsStepwiseDecode) {
  const Case c = GetParam();
  MakeModelOptions options;
  options.shape.arch = c.arch;
  options.shape.n_embd = 256;
  options.shape.n_layers = 2;
  options.shape.n_ff = 256;
  options.shape.n_expert = c.n_expert;
  options.shape.n_expert_used = c.n_expert ? 2 : 0;
  options.shape.tied_output = c.tied;
  options.weight_type = c.type;
  const std::string path = make(options, c.arch + "-" + c.type);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error();
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const auto tokens = tokenizer->encode("the quick brown fox jumps over the lazy dog again and again", true);
  ASSERT_GT(tokens.size(), 10u);
  ASSERT_EQ(tokenizer->decode(tokens), "the quick brown fox jumps over the lazy dog again and again");

  ThreadPool pool(2);
  GeneratorConfig config;
  config.n_ctx = 64;
  config.block_size = 4;
  Generator a(*model.value(), pool, config), b(*model.value(), pool, config);
  auto all = a.eval(tokens, true);
  ASSERT_TRUE(all.ok()) << all.error();
  const int V = model.value()->hparams().n_vocab;
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t one[1] = {tokens[i]};
    auto row = b.eval(one, false);
    ASSERT_TRUE(row.ok());
    for (int v = 0; v < V; ++v) {
      const float x = all.value()[i * V + v];
      ASSERT_TRUE(std::isfinite(x));
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(x - row.value()[v])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
    }
  }
  EXPECT_GT(max_abs, 1e-3);  // not all zeros
  EXPECT_LE(max_diff, 1e-3 * std::max(1.0, max_abs));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Archs, GeneratedModels,
    ::testing::Values(Case{"llama", "f32", 0, false}, Case{"llama", "f16", 0, true}, Case{"llama", "bf16", 0, false},
                      Case{"llama", "q8_0", 0, false}, Case{"llama", "q4_0", 0, false},
                      Case{"llama", "q4_k", 0, false}, Case{"llama", "q6_k", 0, false},
                      Case{"llama", "q4_k_m", 0, false}, Case{"qwen2", "q8_0", 0, false},
                      Case{"llama", "q4_1", 0, false}, Case{"llama", "q5_0", 0, false}, Case{"llama", "q5_1", 0, false},
                      Case{"llama", "q2_k", 0, false}, Case{"llama", "q3_k", 0, false}, Case{"llama", "q5_k", 0, false},
                      Case{"llama", "q3_k_m", 0, false}, Case{"llama", "q5_k_m", 0, false},
                      Case{"qwen3moe", "q5_k", 4, false},
                      Case{"qwen3", "f32", 0, false}, Case{"llama", "f32", 4, false},
                      Case{"qwen3moe", "q4_0", 4, false}, Case{"deepseek2", "f32", 0, false},
                      Case{"deepseek2", "q8_0", 4, false}),
    [](const auto& info) { return info.param.arch + "_" + info.param.type + (info.param.n_expert ? "_moe" : ""); });

TEST(ModelLoad, UnsupportedArchitectureIsNamed) {
  GgufWriter w;
  w.set_string("general.architecture", "mamba");
  const std::string path = test::temp_path("mamba.gguf");
  ASSERT_TRUE(w.write(path, [](size_t, std::vector<uint8_t>&) {}).ok());
  auto m = Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'mamba' is not supported"), std::string::npos) << m.error();
  std::filesystem::remove(path);
}

TEST(ModelLoad, WrongTensorShapeNamesExpectedAndActual) {
  MakeModelOptions options;
  options.shape.n_layers = 1;
  const std::string good = make(options, "shape-good");
  // Rewrite the file with attn_k declared one row short by changing head_count_kv in the metadata instead:
  // the tensors keep their shapes, so binding must report the mismatch.
  auto file = GgufFile::open(good);
  ASSERT_TRUE(file.ok());
  GgufWriter w;
  for (const std::string& key : file->keys()) {
    const GgufValue* v = file->find(key);
    if (key == "llama.attention.head_count_kv") w.set_u32(key, 4);
    else if (v->type == GgufValueType::STRING) w.set_string(key, v->text);
    else if (v->type == GgufValueType::UINT32) w.set_u32(key, static_cast<uint32_t>(v->integer));
    else if (v->type == GgufValueType::FLOAT32) w.set_f32(key, static_cast<float>(v->number));
    else if (v->type == GgufValueType::BOOL) w.set_bool(key, v->integer != 0);
    else if (v->is_array() && v->array_type == GgufValueType::STRING) w.set_string_array(key, v->strings);
    else if (v->is_array() && v->array_type == GgufValueType::FLOAT32) w.set_f32_array(key, std::vector<float>(v->numbers.begin(), v->numbers.end()));
    else if (v->is_array()) w.set_i32_array(key, std::vector<int32_t>(v->numbers.begin(), v->numbers.end()));
  }
  for (const TensorView& t : file->tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  const std::string bad = test::temp_path("shape-bad.gguf");
  ASSERT_TRUE(w.write(bad, [&](size_t i, std::vector<uint8_t>& bytes) {
                 std::memcpy(bytes.data(), file->tensors()[i].data, bytes.size());
               }).ok());
  auto m = Model::load(bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("blk.0.attn_k.weight' has shape [256, 64], expected [256, 128]"), std::string::npos)
      << m.error();
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST(Generator, ContextOverflowAndBadTokensAreErrors) {
  MakeModelOptions options;
  options.shape.n_layers = 1;
  const std::string path = make(options, "ctx");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  ThreadPool pool(1);
  GeneratorConfig config;
  config.n_ctx = 8;
  Generator g(*model.value(), pool, config);
  const std::vector<int32_t> nine(9, 5);
  EXPECT_FALSE(g.eval(nine, false).ok());
  const std::vector<int32_t> bad = {1, 999999};
  auto r = g.eval(bad, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(g.n_past(), 0);
  EXPECT_EQ(g.block_pool().n_in_use(), 0);
  const std::vector<int32_t> ok = {1, 5, 6};
  EXPECT_TRUE(g.eval(ok, false).ok());
  EXPECT_EQ(g.block_pool().n_in_use(), 1);
  g.reset();
  EXPECT_EQ(g.block_pool().n_in_use(), 0);
  std::filesystem::remove(path);
}

TEST(MakeModel, FanInInitScalesEachMatrixByItsRowLength) {
  MakeModelOptions options;
  options.shape.n_layers = 1;
  options.shape.n_embd = 256;
  options.shape.n_ff = 1024;
  options.fan_in_init = true;
  const std::string path = make(options, "fan-in");
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  int n_checked = 0;
  for (const TensorView& t : file->tensors()) {
    ASSERT_EQ(t.type, DType::F32) << t.name;
    const auto* x = reinterpret_cast<const float*>(t.data);
    const size_t n = t.n_bytes / sizeof(float);
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; ++i) sum += x[i], sum2 += static_cast<double>(x[i]) * x[i];
    const double mean = sum / static_cast<double>(n), stddev = std::sqrt(sum2 / static_cast<double>(n) - mean * mean);
    if (t.n_dims == 1) {  // norms: around 1, spread 0.1
      EXPECT_NEAR(mean, 1.0, 0.05) << t.name;
      continue;
    }
    const double expected = 1.0 / std::sqrt(static_cast<double>(t.ne[0]));  // ffn_down: 1/32, the rest 1/16
    EXPECT_NEAR(stddev, expected, 0.05 * expected) << t.name;
    ++n_checked;
  }
  EXPECT_GE(n_checked, 9);  // token_embd, output, q, k, v, attn_output, gate, up, down
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kestrel
