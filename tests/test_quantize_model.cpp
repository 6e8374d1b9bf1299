// kestrel quantize: llama.cpp's per-tensor rules (quant/recipe.h), and whole files: every converted tensor
// holds exactly the reference quantizer's blocks of its source rows, everything else is copied, and the
// result loads and runs close to the source model.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/generator.h"
#include "io/gguf.h"
#include "model/model_maker.h"
#include "model/model_quantizer.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"
#include "quant/recipe.h"
#include "test_support.h"

namespace kestrel {
namespace {

DType type_of(const QuantScheme& s, const std::string& name, std::vector<int64_t> dims, QuantModelFacts facts,
              bool pure = false) {
  return quant_tensor_type(s, pure, name, dims, facts).value_or(DType::F32);
}

TEST(QuantRecipe, SchemesByName) {
  EXPECT_EQ(find_quant_scheme("q4_k_m")->name, "Q4_K_M");
  EXPECT_EQ(find_quant_scheme("Q4_K")->name, "Q4_K_M");  // llama-quantize's alias
  EXPECT_EQ(find_quant_scheme("q8_0")->base, DType::Q8_0);
  EXPECT_EQ(find_quant_scheme("Q4_0")->file_type, 2u);
  EXPECT_EQ(find_quant_scheme("Q4_K_M")->file_type, 15u);
  EXPECT_FALSE(find_quant_scheme("Q9_9"));
  EXPECT_FALSE(find_quant_scheme(""));
  EXPECT_NE(quant_scheme_names().find("Q6_K"), std::string::npos);
  EXPECT_EQ(find_quant_scheme("fp8")->base, DType::FP8_E4M3);  // kestrel's own types
  EXPECT_EQ(find_quant_scheme("W8A8")->base, DType::I8);
  // llama.cpp's names and general.file_type ids for the 5-bit and min schemes.
  EXPECT_EQ(find_quant_scheme("Q5_K")->name, "Q5_K_M");
  EXPECT_EQ(find_quant_scheme("q5_k_m")->file_type, 17u);
  EXPECT_EQ(find_quant_scheme("Q5_K_S")->file_type, 16u);
  EXPECT_EQ(find_quant_scheme("Q5_K_S")->mix, QuantScheme::Mix::Pure);
  EXPECT_EQ(find_quant_scheme("Q3_K")->name, "Q3_K_M");
  EXPECT_EQ(find_quant_scheme("Q3_K_M")->file_type, 12u);
  EXPECT_EQ(find_quant_scheme("q2_k")->file_type, 10u);
  EXPECT_EQ(find_quant_scheme("Q4_1")->file_type, 3u);
  EXPECT_EQ(find_quant_scheme("Q5_0")->file_type, 8u);
  EXPECT_EQ(find_quant_scheme("Q5_1")->file_type, 9u);
  EXPECT_EQ(find_quant_scheme("Q5_1")->base, DType::Q5_1);
}

// TinyLlama's shape (22 layers, rows of 2048 and 5632) under Q4_K_M: Q6_K for the output and for attn_v /
// ffn_down in layers 0, 1, 4, 7, 10, 13, 16, 19, 20, 21 (llama.cpp's use_more_bits), Q4_K elsewhere.
TEST(QuantRecipe, Q4KMGivesMoreBitsWhereLlamaCppDoes) {
  const QuantModelFacts facts{22, 0, true};
  for (const char* name : {"Q4_K_M", "Q5_K_M"}) {  // the same rules over Q4_K and Q5_K
    SCOPED_TRACE(name);
    const QuantScheme m = *find_quant_scheme(name);
    std::vector<int> more;
    for (int il = 0; il < 22; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      const DType v = type_of(m, p + "attn_v.weight", {2048, 256}, facts);
      EXPECT_EQ(type_of(m, p + "ffn_down.weight", {5632, 2048}, facts), v) << il;
      EXPECT_EQ(type_of(m, p + "attn_q.weight", {2048, 2048}, facts), m.base);
      EXPECT_EQ(type_of(m, p + "ffn_up.weight", {2048, 5632}, facts), m.base);
      EXPECT_FALSE(quant_tensor_type(m, false, p + "attn_norm.weight", {2048}, facts));
      if (v == DType::Q6_K) more.push_back(il);
      else EXPECT_EQ(v, m.base);
    }
    EXPECT_EQ(more, (std::vector<int>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
    EXPECT_EQ(type_of(m, "output.weight", {2048, 32000}, facts), DType::Q6_K);
  }
  const QuantScheme s = *find_quant_scheme("Q4_K_M");
  // Q5_K_S: Q5_K everywhere but the output.
  const QuantScheme q5ks = *find_quant_scheme("Q5_K_S");
  EXPECT_EQ(type_of(q5ks, "blk.0.attn_v.weight", {2048, 256}, facts), DType::Q5_K);
  EXPECT_EQ(type_of(q5ks, "output.weight", {2048, 32000}, facts), DType::Q6_K);
  EXPECT_EQ(type_of(s, "token_embd.weight", {2048, 32000}, facts), DType::Q4_K);
  EXPECT_EQ(type_of(s, "token_embd.weight", {2048, 32000}, {22, 0, false}), DType::Q6_K);  // tied output
  EXPECT_FALSE(quant_tensor_type(s, false, "output_norm.weight", {2048}, facts));
  EXPECT_FALSE(quant_tensor_type(s, false, "rope_freqs.weight", {32}, facts));
  EXPECT_FALSE(quant_tensor_type(s, false, "blk.0.attn_q.bias", {2048, 1}, facts));
  // Pure: the base type everywhere.
  EXPECT_EQ(type_of(s, "output.weight", {2048, 32000}, facts, true), DType::Q4_K);
  EXPECT_EQ(type_of(s, "blk.0.attn_v.weight", {2048, 256}, facts, true), DType::Q4_K);
}

// llama.cpp's Q3_K_M and Q2_K on TinyLlama's shape (22 layers, 32 query heads on 4 KV heads).
TEST(QuantRecipe, LowBitMixturesFollowLlamaCpp) {
  const QuantModelFacts facts{22, 0, true, 8};
  const QuantScheme q3km = *find_quant_scheme("Q3_K_M"), q2k = *find_quant_scheme("Q2_K");
  for (int il = 0; il < 22; ++il) {
    SCOPED_TRACE(il);
    const std::string p = "blk." + std::to_string(il) + ".";
    EXPECT_EQ(type_of(q3km, p + "attn_v.weight", {2048, 256}, facts), il < 2 ? DType::Q5_K : DType::Q4_K);
    EXPECT_EQ(type_of(q3km, p + "ffn_down.weight", {5632, 2048}, facts), il < 1 ? DType::Q5_K : DType::Q4_K);
    EXPECT_EQ(type_of(q3km, p + "attn_output.weight", {2048, 2048}, facts), DType::Q4_K);
    EXPECT_EQ(type_of(q3km, p + "attn_q.weight", {2048, 2048}, facts), DType::Q3_K);
    EXPECT_EQ(type_of(q3km, p + "ffn_gate.weight", {2048, 5632}, facts), DType::Q3_K);
    EXPECT_EQ(type_of(q2k, p + "attn_v.weight", {2048, 256}, facts), DType::Q4_K);  // GQA 8
    EXPECT_EQ(type_of(q2k, p + "ffn_down.weight", {5632, 2048}, facts), DType::Q3_K);
    EXPECT_EQ(type_of(q2k, p + "attn_output.weight", {2048, 2048}, facts), DType::Q3_K);
    EXPECT_EQ(type_of(q2k, p + "attn_k.weight", {2048, 256}, facts), DType::Q2_K);
  }
  EXPECT_EQ(type_of(q2k, "blk.0.attn_v.weight", {2048, 2048}, {22, 0, true, 1}), DType::Q3_K);  // no GQA
  EXPECT_EQ(type_of(q3km, "output.weight", {2048, 32000}, facts), DType::Q6_K);
  EXPECT_EQ(type_of(q2k, "output.weight", {2048, 32000}, facts), DType::Q6_K);
  // 8 experts: Q5_K attn_output, Q8_0 attn_v.
  EXPECT_EQ(type_of(q2k, "blk.3.attn_output.weight", {2048, 2048}, {22, 8, true, 8}), DType::Q5_K);
  EXPECT_EQ(type_of(q3km, "blk.3.attn_output.weight", {2048, 2048}, {22, 8, true, 8}), DType::Q5_K);
  EXPECT_EQ(type_of(q3km, "blk.3.attn_v.weight", {2048, 256}, {22, 8, true, 8}), DType::Q8_0);
  EXPECT_EQ(type_of(*find_quant_scheme("Q4_0"), "blk.3.attn_output.weight", {2048, 2048}, {22, 8, true, 8}), DType::Q4_0);
  // Rows that do not split into 256: Q4_0 (llama.cpp's IQ4_NL, which kestrel does not have).
  EXPECT_EQ(type_of(q3km, "blk.3.attn_q.weight", {96, 64}, facts), DType::Q4_0);
}

TEST(QuantRecipe, OutputExpertAndRowSizeRules) {
  const QuantModelFacts facts{4, 0, true};
  const QuantScheme q4 = *find_quant_scheme("Q4_0"), q8 = *find_quant_scheme("Q8_0"), f16 = *find_quant_scheme("F16");
  EXPECT_EQ(type_of(q4, "output.weight", {2048, 32000}, facts), DType::Q6_K);
  EXPECT_EQ(type_of(q4, "output.weight", {2048, 32000}, facts, true), DType::Q4_0);
  EXPECT_EQ(type_of(q4, "output.weight", {2080, 32000}, facts), DType::Q8_0);  // rows not a multiple of 256
  EXPECT_EQ(type_of(q8, "output.weight", {2048, 32000}, facts), DType::Q8_0);
  EXPECT_EQ(type_of(f16, "output.weight", {2048, 32000}, facts), DType::F16);
  EXPECT_EQ(type_of(f16, "blk.0.ffn_down.weight", {172, 64}, facts), DType::F16);
  // Routers stay as they are; 8-expert models get Q8_0 attn_k / attn_v.
  EXPECT_FALSE(quant_tensor_type(q4, false, "blk.0.ffn_gate_inp.weight", {2048, 8}, {4, 8, true}));
  EXPECT_EQ(type_of(q4, "blk.0.attn_v.weight", {2048, 256}, {4, 8, true}), DType::Q8_0);
  EXPECT_EQ(type_of(q4, "blk.0.attn_k.weight", {2048, 256}, {4, 8, true}), DType::Q8_0);
  EXPECT_EQ(type_of(q4, "blk.0.ffn_up_exps.weight", {2048, 5632, 8}, {4, 8, true}), DType::Q4_0);
  // 8-expert Q4_K_M models: Q5_K attn_output.
  const QuantScheme q4km = *find_quant_scheme("Q4_K_M");
  EXPECT_EQ(type_of(q4km, "blk.0.attn_output.weight", {2048, 2048}, {4, 8, true}), DType::Q5_K);
  EXPECT_EQ(type_of(q4km, "blk.0.attn_output.weight", {2048, 2048}, facts), DType::Q4_K);
  // Rows that do not split into blocks fall back as llama.cpp's do: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
  // Q8_0, then F16.
  EXPECT_EQ(type_of(q4km, "blk.0.attn_q.weight", {64, 64}, facts), DType::Q5_0);
  EXPECT_EQ(type_of(*find_quant_scheme("Q5_K_M"), "blk.0.attn_q.weight", {96, 64}, facts), DType::Q5_1);
  EXPECT_EQ(type_of(*find_quant_scheme("Q6_K"), "blk.0.attn_q.weight", {96, 64}, facts), DType::Q8_0);
  EXPECT_EQ(type_of(q4km, "blk.0.ffn_down.weight", {172, 64}, facts), DType::F16);
  EXPECT_EQ(type_of(q4, "blk.0.ffn_down.weight", {172, 64}, facts), DType::F16);
}

class QuantizeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeModelOptions options;
    options.shape.n_embd = 256;
    options.shape.n_layers = 3;
    options.shape.n_ff = 512;
    options.weight_type = "f32";
    ASSERT_TRUE(make_model(options, source).ok());
    n_gqa = options.shape.n_heads / options.shape.n_kv_heads;
  }
  void TearDown() override {
    std::filesystem::remove(source);
    std::filesystem::remove(output);
  }
  // Quantizes source to `scheme` and checks every tensor of the output against the rules and the reference
  // quantizers.
  void convert_and_check(const QuantScheme& scheme);
  std::string source = test::temp_path("quantize-src.gguf"), output = test::temp_path("quantize-out.gguf");
  int n_gqa = 1;  // the source model's query heads per KV head
  ThreadPool pool{2};
};

TEST_F(QuantizeModel, ConvertsByTheRulesAndCopiesTheRest) {
  for (const char* name : {"Q4_K_M", "Q5_K_M", "Q3_K_M", "Q2_K", "Q4_1", "Q5_0", "Q5_1"}) {
    SCOPED_TRACE(name);
    convert_and_check(*find_quant_scheme(name));
  }
}

void QuantizeModel::convert_and_check(const QuantScheme& scheme) {
  double last_progress = 0;
  auto report = quantize_model({source, output, scheme, false}, pool, [&](double f) { last_progress = f; });
  ASSERT_TRUE(report.ok()) << report.error();
  EXPECT_DOUBLE_EQ(last_progress, 1.0);
  auto in = GgufFile::open(source);
  auto out = GgufFile::open(output);
  ASSERT_TRUE(in.ok() && out.ok());
  // Metadata: every key copied as it was, general.file_type set to the scheme's.
  for (const std::string& key : in->keys()) {
    if (key == "general.file_type") continue;
    ASSERT_TRUE(out->find(key)) << key;
    EXPECT_EQ(out->find(key)->to_display_string(1 << 20), in->find(key)->to_display_string(1 << 20)) << key;
  }
  EXPECT_EQ(*out->get_int("general.file_type").value(), static_cast<int64_t>(scheme.file_type));
  // Tensors: the recipe's types; converted ones hold the reference quantizer's blocks of the source rows.
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  const QuantModelFacts facts{3, 0, true, n_gqa};
  int converted = 0;
  for (size_t i = 0; i < in->tensors().size(); ++i) {
    const TensorView& a = in->tensors()[i];
    const TensorView& b = out->tensors()[i];
    SCOPED_TRACE(a.name);
    ASSERT_EQ(b.name, a.name);
    ASSERT_EQ(b.ne, a.ne);
    const std::vector<int64_t> dims(a.ne.begin(), a.ne.begin() + a.n_dims);
    const DType want = quant_tensor_type(scheme, false, a.name, dims, facts).value_or(a.type);
    ASSERT_EQ(b.type, want);
    EXPECT_EQ(report->tensors[i].to, want);
    if (want == a.type) {
      EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0);
      continue;
    }
    ++converted;
    std::vector<uint8_t> expect(b.row_bytes());
    for (int64_t r = 0; r < a.n_rows(); r += 7) {
      // Round to nearest; K-quants search their sub-block scales (with equal weights), as llama.cpp's do.
      const float* row = reinterpret_cast<const float*>(a.row(r));
      if (dtype_traits(b.type).block_elems == 256)
        quantize_row_weighted(b.type, row, expect.data(), static_cast<size_t>(a.ne[0]), nullptr);
      else
        quantize_row(b.type, row, expect.data(), static_cast<size_t>(a.ne[0]));
      ASSERT_EQ(std::memcmp(expect.data(), b.row(r), expect.size()), 0) << "row " << r;
    }
    EXPECT_GT(report->tensors[i].rel_error, 0.0);
    const bool five_bit = b.type == DType::Q5_0 || b.type == DType::Q5_1 || b.type == DType::Q5_K;
    const double bound = b.type == DType::Q6_K ? 0.05 : five_bit ? 0.08 : b.type == DType::Q3_K ? 0.25 : b.type == DType::Q2_K ? 0.45 : 0.15;
    EXPECT_LT(report->tensors[i].rel_error, bound);
  }
  EXPECT_EQ(converted, 3 * 7 + 2);  // 7 matrices per layer, token_embd and output
  EXPECT_EQ(out->find_tensor("output.weight")->type, DType::Q6_K);
  // Bits per weight: the base type's, raised by the Q6_K output (and attn_v / ffn_down for the _M mixtures).
  const double base_bits = 8.0 * dtype_traits(scheme.base).block_bytes / dtype_traits(scheme.base).block_elems;
  EXPECT_GT(report->bits_per_weight(), base_bits);
  EXPECT_LT(report->bits_per_weight(), base_bits + (scheme.base == DType::Q2_K || scheme.base == DType::Q3_K ? 2.0 : 1.0));
}

// Logits of the quantized file against the source's: Q8_0 within a few percent (relative RMS), and Q4_0
// several times further off.
TEST_F(QuantizeModel, OutputRunsCloseToTheSourceAsItsBitsAllow) {
  auto a = Model::load(source);
  ASSERT_TRUE(a.ok());
  const std::vector<int32_t> tokens = test::iota_tokens(12, 300);
  GeneratorConfig config;
  config.n_ctx = 32;
  Generator ga(*a.value(), pool, config);
  auto la = ga.eval(tokens, true);
  ASSERT_TRUE(la.ok());
  const auto logits_error = [&](const char* scheme) {
    EXPECT_TRUE(quantize_model({source, output, *find_quant_scheme(scheme), true}, pool).ok());
    auto b = Model::load(output);
    EXPECT_TRUE(b.ok());
    Generator gb(*b.value(), pool, config);
    auto lb = gb.eval(tokens, true);
    EXPECT_TRUE(lb.ok());
    double diff = 0, ref = 0;
    for (size_t i = 0; i < la->size(); ++i) diff += std::pow((*la)[i] - (*lb)[i], 2), ref += std::pow((*la)[i], 2);
    return std::sqrt(diff / ref);
  };
  const double q8 = logits_error("Q8_0"), q4 = logits_error("Q4_0"), fp8 = logits_error("FP8_E4M3");
  EXPECT_LT(q8, 0.05);
  EXPECT_LT(3 * q8, q4);
  // E4M3 keeps 3 mantissa bits (~2.4% RMS per weight against Q8_0's 0.4%): between the two.
  EXPECT_LT(fp8, 0.25);
  EXPECT_LT(q8, fp8);
  EXPECT_LT(fp8, q4);
}

TEST_F(QuantizeModel, RefusesToRequantizeAndNamesBadInput) {
  ASSERT_TRUE(quantize_model({source, output, *find_quant_scheme("Q4_0"), false}, pool).ok());
  const std::string again = test::temp_path("quantize-again.gguf");
  auto r = quantize_model({output, again, *find_quant_scheme("Q8_0"), false}, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("already Q4_0"), std::string::npos) << r.error();
  // The same scheme again converts nothing, so the file is copied.
  EXPECT_TRUE(quantize_model({output, again, *find_quant_scheme("Q4_0"), false}, pool).ok());
  std::filesystem::remove(again);
  auto missing = quantize_model({"/nonexistent.gguf", again, *find_quant_scheme("Q8_0"), false}, pool);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("nonexistent"), std::string::npos) << missing.error();
  EXPECT_FALSE(quantize_model({source, "/nonexistent-dir/x.gguf", *find_quant_scheme("Q8_0"), false}, pool).ok());
}

}  // namespace
}  // namespace kestrel
