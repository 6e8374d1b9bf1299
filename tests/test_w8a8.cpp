// W8A8 (int8 weights and activations): the int8 row dots on every ISA against the reference, the GEMM
// against float arithmetic on the quantized values, SmoothQuant's factors and the int8 rows, and whole
// models written by `quantize W8A8`: they run, SmoothQuant and outlier channels track the float model
// better than naive W8A8 on a model with activation outliers, and damaged companion tensors are refused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "compute/cpu/int8_dot.h"
#include "compute/cpu/w8a8_gemm.h"
#include "core/fp16.h"
#include "engine/generator.h"
#include "io/gguf.h"
#include "model/calibration.h"
#include "model/model_maker.h"
#include "model/model_quantizer.h"
#include "quant/w8a8.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<int8_t> random_int8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

TEST(W8A8, Int8DotsMatchTheReferenceOnEveryIsa) {
  for (const size_t n : {1u, 31u, 32u, 63u, 64u, 100u, 172u, 2048u, 5000u}) {
    const size_t stride = n + 7;
    auto w = random_int8(stride * kDotI8MaxRows, 1), x = random_int8(stride * kDotI8MaxTokens, 2);
    w[0] = 127, x[0] = -127, x[stride] = 127;  // extremes: products of 2 * 127^2 per pair must not saturate
    if (n > 1) w[1] = -127, x[1] = -127;
    for (int nr = 1; nr <= kDotI8MaxRows; ++nr)
      for (int nt = 1; nt <= kDotI8MaxTokens; ++nt) {
        int32_t want[kDotI8MaxRows * kDotI8MaxTokens], got[kDotI8MaxRows * kDotI8MaxTokens];
        dot_i8_reference(w.data(), stride, nr, x.data(), stride, nt, n, want, nullptr);
        for (Isa isa : runnable_isas()) {
          int8_kernels(isa).dot(w.data(), stride, nr, x.data(), stride, nt, n, got, w.data());
          for (int r = 0; r < nr; ++r)
            for (int t = 0; t < nt; ++t)
              ASSERT_EQ(got[r * kDotI8MaxTokens + t], want[r * kDotI8MaxTokens + t])
                  << isa_name(isa) << " n=" << n << " r=" << r << " t=" << t;
        }
      }
  }
  // All +-127 at length 4096: 4096 * 127^2 still fits int32 accumulators, and no 16-bit step saturates.
  const std::vector<int8_t> w(4096, -127), x(4096, -127), y(4096, 127);
  int32_t got[kDotI8MaxRows * kDotI8MaxTokens] = {};
  for (Isa isa : runnable_isas()) {
    int8_kernels(isa).dot(w.data(), 4096, 1, x.data(), 4096, 1, 4096, got, nullptr);
    EXPECT_EQ(got[0], 4096 * 127 * 127) << isa_name(isa);
    int8_kernels(isa).dot(w.data(), 4096, 1, y.data(), 4096, 1, 4096, got, nullptr);
    EXPECT_EQ(got[0], -4096 * 127 * 127) << isa_name(isa);
  }
}

TEST(W8A8, ActivationKernelsMatchTheReferenceOnEveryIsa) {
  for (const size_t n : {1u, 15u, 16u, 33u, 100u, 2048u}) {
    auto x = test::gaussian_vector(n, 11, 3.0f);
    x[0] = 1000.0f;  // clamps
    if (n > 2) x[1] = -0.5f, x[2] = 0.5f;  // halves round away from zero
    std::vector<int8_t> want(n), got(n);
    quantize_i8_reference(x.data(), n, 1.0f, want.data());
    EXPECT_EQ(want[0], 127);
    if (n > 2) {
      EXPECT_EQ(want[1], -1);
      EXPECT_EQ(want[2], 1);
    }
    for (Isa isa : runnable_isas()) {
      const Int8Kernels k = int8_kernels(isa);
      k.quantize(x.data(), n, 1.0f, got.data());
      EXPECT_EQ(got, want) << isa_name(isa) << " n=" << n;
      std::vector<float> y = x;
      y[n - 1] = -2000.0f;  // the largest in the tail
      EXPECT_EQ(k.max_abs(y.data(), n), 2000.0f) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(k.max_abs(x.data(), n), max_abs_reference(x.data(), n)) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(W8A8, InputRowsQuantizePerTokenOrWithTheStaticScaleLeavingOutliersOut) {
  const std::vector<float> x = {0.5f, -100.0f, 1.0f, -2.0f, 0.25f};
  std::vector<int8_t> q(x.size());
  Int8Scales dynamic;
  EXPECT_FLOAT_EQ(quantize_w8a8_input_row(dynamic, x.data(), x.size(), q.data()), 100.0f / 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 1);  // 1.27 rounds to 1: the outlier channel coarsens every other one
  const int32_t outlier[] = {1};
  Int8Scales decomposed;
  decomposed.outlier_channels = outlier;
  EXPECT_FLOAT_EQ(quantize_w8a8_input_row(decomposed, x.data(), x.size(), q.data()), 2.0f / 127);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[3], -127);
  EXPECT_EQ(q[2], 64);
  Int8Scales fixed;
  fixed.input_scale = 0.01f;
  EXPECT_FLOAT_EQ(quantize_w8a8_input_row(fixed, x.data(), x.size(), q.data()), 0.01f);
  EXPECT_EQ(q[0], 50);
  EXPECT_EQ(q[1], -127);  // clamped
  std::vector<float> zeros(5, 0.0f);
  EXPECT_EQ(quantize_w8a8_input_row(dynamic, zeros.data(), zeros.size(), q.data()), 0.0f);
  EXPECT_EQ(q[0], 0);
}

// The GEMM is exactly the float arithmetic on the quantized values (up to float summation order).
TEST(W8A8, GemmMatchesItsDefinition) {
  const int64_t n_in = 200, n_out = 37;  // rows: two 16-row tiles, then 4-row tiles and a remainder
  const auto q = random_int8(static_cast<size_t>(n_in * n_out), 3);
  const auto row_scale_v = test::gaussian_vector(static_cast<size_t>(n_out), 4, 0.01f);
  std::vector<float> row_scale(row_scale_v.size());
  for (size_t i = 0; i < row_scale.size(); ++i) row_scale[i] = std::fabs(row_scale_v[i]) + 1e-3f;
  const std::vector<int32_t> outliers = {3, 77, 199};
  std::vector<uint16_t> outlier_weight(static_cast<size_t>(n_out) * outliers.size());
  const auto ow = test::gaussian_vector(outlier_weight.size(), 5);
  for (size_t i = 0; i < ow.size(); ++i) outlier_weight[i] = fp32_to_fp16(ow[i]);
  ThreadPool pool(2);
  for (const bool with_outliers : {false, true})
    for (const float input_scale : {0.0f, 0.02f})
      for (const int n_tok : {1, 3, 9}) {
        Int8Scales scales;
        scales.row_scale = row_scale.data();
        scales.input_scale = input_scale;
        if (with_outliers) scales.outlier_channels = outliers, scales.outlier_weight = outlier_weight.data();
        WeightMatrix w;
        w.type = DType::I8, w.n_in = n_in, w.n_out = n_out, w.row_bytes = static_cast<size_t>(n_in);
        w.data = reinterpret_cast<const uint8_t*>(q.data());
        w.int8 = &scales;
        auto x = test::gaussian_vector(static_cast<size_t>(n_tok * n_in), 6);
        x[3] = 40.0f;  // an outlier
        std::vector<float> y(static_cast<size_t>(n_tok * n_out), 1.0f), want(y.size());
        for (int t = 0; t < n_tok; ++t) {
          std::vector<int8_t> xq(static_cast<size_t>(n_in));
          const float s = quantize_w8a8_input_row(scales, x.data() + t * n_in, static_cast<size_t>(n_in), xq.data());
          for (int64_t r = 0; r < n_out; ++r) {
            double acc = 0;
            for (int64_t i = 0; i < n_in; ++i) acc += static_cast<double>(q[static_cast<size_t>(r * n_in + i)]) * xq[static_cast<size_t>(i)];
            double v = acc * s * row_scale[static_cast<size_t>(r)];
            for (size_t j = 0; j < scales.outlier_channels.size(); ++j)
              v += x[static_cast<size_t>(t * n_in + outliers[j])] * fp16_to_fp32(outlier_weight[static_cast<size_t>(r) * outliers.size() + j]);
            want[static_cast<size_t>(t * n_out + r)] = static_cast<float>(v);
          }
        }
        ops::matmul(pool, w, x.data(), y.data(), n_tok);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
        ops::matmul(pool, w, x.data(), y.data(), n_tok, ops::Accumulate::Yes);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], 2 * want[i], 2e-4 * (1 + std::fabs(want[i]))) << i;
      }
}

TEST(W8A8, SmoothingFactorsBalanceActivationAndWeightRanges) {
  const std::vector<float> act = {100.0f, 1.0f, 0.0f, 4.0f};
  const std::vector<float> w1 = {1.0f, 4.0f, 2.0f, -1.0f}, w2 = {-0.25f, 1.0f, 1.0f, 0.0f};  // [1][4] each
  const std::vector<float>* ws[] = {&w1, &w2};
  const auto s = smoothing_factors(act, ws, 0.5f);
  EXPECT_NEAR(s[0], std::sqrt(100.0f) / std::sqrt(1.0f), 1e-5);
  EXPECT_NEAR(s[1], 1.0f / 2.0f, 1e-5);  // max|W| over both matrices is 4
  EXPECT_EQ(s[2], 1.0f);                 // a channel no input reached is left alone
  EXPECT_NEAR(s[3], 2.0f, 1e-5);
  // After smoothing, alpha = 0.5 leaves each channel's activation and weight ranges equal.
  for (size_t j : {0u, 1u, 3u}) EXPECT_NEAR(act[j] / s[j], std::max(std::fabs(w1[j]), std::fabs(w2[j])) * s[j], 1e-4);
  // Tied channels (heads reading one V row) share one factor from their pooled ranges.
  const int64_t tie[] = {0, 1, 0, 1};
  const auto tied = smoothing_factors(act, ws, 0.5f, tie);
  EXPECT_EQ(tied[0], tied[2]);
  EXPECT_EQ(tied[1], tied[3]);
  EXPECT_NEAR(tied[0], std::sqrt(100.0f / 2.0f), 1e-4);  // max act 100, max |W| over columns 0 and 2: 2
  EXPECT_NEAR(tied[1], std::sqrt(4.0f / 4.0f), 1e-4);
  EXPECT_EQ(outlier_channels(act, 1.0f, 4), (std::vector<int32_t>{0, 3}));  // median (upper) 4 of 0, 1, 4, 100
  EXPECT_EQ(outlier_channels(act, 1.0f, 1), (std::vector<int32_t>{0}));     // the largest first
  EXPECT_EQ(outlier_channels(act, 200.0f, 4), (std::vector<int32_t>{}));
  const int32_t out[] = {0};
  EXPECT_FLOAT_EQ(static_input_scale(act, out), 4.0f / 127);
}

TEST(W8A8, Int8RowsRoundWithinHalfAStep) {
  auto w = test::gaussian_vector(300, 8);
  w[10] = 50.0f;  // an outlier column kept in F16
  const int32_t outliers[] = {10};
  std::vector<int8_t> q(w.size());
  uint16_t kept = 0;
  const float scale = quantize_int8_row(w.data(), w.size(), outliers, q.data(), &kept);
  float amax = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (i != 10) amax = std::max(amax, std::fabs(w[i]));
  EXPECT_FLOAT_EQ(scale, amax / 127);
  EXPECT_EQ(q[10], 0);
  EXPECT_EQ(fp16_to_fp32(kept), 50.0f);
  for (size_t i = 0; i < w.size(); ++i) {
    if (i == 10) continue;
    ASSERT_LE(std::fabs(q[i] * scale - w[i]), 0.5f * scale * 1.0001f) << i;
  }
}

// A small model with planted activation outliers, quantized to W8A8 in each variant.
class W8A8Model : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeModelOptions options;
    options.shape.n_embd = 256;
    options.shape.n_layers = 2;
    options.shape.n_heads = 8;
    options.shape.n_kv_heads = 2;
    options.shape.n_ff = 512;
    options.outlier_channels = 6;
    ASSERT_TRUE(make_model(options, path).ok());
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok());
    for (int c = 0; c < 6; ++c) chunks.push_back(test::iota_tokens(64, 40 + 40 * c));
    auto measured = collect_importance(*model.value(), pool, chunks);
    ASSERT_TRUE(measured.ok());
    importance = std::move(measured).value();
    base = logits_of(path);
  }
  void TearDown() override {
    for (const std::string& f : {path, out}) std::filesystem::remove(f);
  }
  std::vector<float> logits_of(const std::string& file_path) {
    auto m = Model::load(file_path);
    EXPECT_TRUE(m.ok()) << m.error();
    if (!m.ok()) return {};
    GeneratorConfig config;
    config.n_ctx = 64;
    config.kv_types = KvType::F32;
    Generator g(*m.value(), pool, config);
    auto l = g.eval(chunks[1], true);  // measured where calibrated: random weights do not generalise
    EXPECT_TRUE(l.ok());
    return l.ok() ? l.value() : std::vector<float>();
  }
  // Relative RMS logit error of the W8A8 file written with these options.
  double error_with(QuantMethod method, float alpha, float outlier_threshold = 0, bool static_scales = false) {
    QuantizeOptions q{path, out, *find_quant_scheme("W8A8")};
    q.method = method;
    q.importance = &importance;
    q.smooth_alpha = alpha;
    q.outlier_threshold = outlier_threshold;
    q.static_scales = static_scales;
    auto report = quantize_model(q, pool);
    EXPECT_TRUE(report.ok()) << report.error();
    if (!report.ok()) return 1e9;
    int int8 = 0;
    for (const auto& t : report->tensors) int8 += t.to == DType::I8;
    EXPECT_EQ(int8, 14);  // q, k, v, o, gate, up, down of both layers
    const std::vector<float> l = logits_of(out);
    double e = 0, s = 0;
    for (size_t i = 0; i < base.size() && i < l.size(); ++i) e += std::pow(l[i] - base[i], 2), s += std::pow(base[i], 2);
    return l.size() == base.size() ? std::sqrt(e / s) : 1e9;
  }
  std::string path = test::temp_path("w8a8.gguf"), out = test::temp_path("w8a8-q.gguf");
  ThreadPool pool{2};
  std::vector<std::vector<int32_t>> chunks;
  ImportanceMatrix importance;
  std::vector<float> base;
};

TEST_F(W8A8Model, SmoothQuantAndOutlierChannelsTrackTheFloatModelBetter) {
  const double naive = error_with(QuantMethod::W8A8, -1.0f);
  const double smooth = error_with(QuantMethod::SmoothQuant, 0.5f);
  // The planted channels are far above the others: everything from 4x the median range up stays float.
  const double decomposed = error_with(QuantMethod::W8A8, -1.0f, 4.0f);
  const double fixed = error_with(QuantMethod::SmoothQuant, 0.5f, 0.0f, true);
  std::printf("relative logit error: naive %.4f, smoothquant %.4f, outliers in f16 %.4f, smoothquant static %.4f\n", naive,
              smooth, decomposed, fixed);
  EXPECT_LT(naive, 0.5);
  EXPECT_LT(smooth, 0.6 * naive);
  EXPECT_LT(decomposed, 0.6 * naive);
  EXPECT_LT(fixed, 2 * naive);
}

// A file whose int8 matrices lack their scales, or whose outlier list is damaged, is refused by name.
TEST_F(W8A8Model, DamagedCompanionsAreRefused) {
  QuantizeOptions q{path, out, *find_quant_scheme("W8A8")};
  q.method = QuantMethod::W8A8;
  q.importance = &importance;
  q.outlier_threshold = 1e-3f;  // every channel an outlier, up to the cap: the lists are long
  ASSERT_TRUE(quantize_model(q, pool).ok());
  const std::string damaged = test::temp_path("w8a8-damaged.gguf");
  const auto rewrite = [&](const std::string& drop, const std::string& reverse) {
    auto file = GgufFile::open(out);
    ASSERT_TRUE(file.ok());
    GgufWriter w;
    for (const std::string& key : file->keys()) w.set_value(key, *file->find(key));
    std::vector<const TensorView*> kept;
    for (const TensorView& t : file->tensors())
      if (t.name != drop) {
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
        kept.push_back(&t);
      }
    ASSERT_TRUE(w.write(damaged, [&](size_t i, std::vector<uint8_t>& bytes) {
                   std::memcpy(bytes.data(), kept[i]->data, kept[i]->n_bytes);
                   if (kept[i]->name == reverse) std::reverse(reinterpret_cast<int32_t*>(bytes.data()),
                                                              reinterpret_cast<int32_t*>(bytes.data() + bytes.size()));
                 }, file->alignment()).ok());
  };
  rewrite("blk.1.ffn_up.weight_scale", "");
  auto loaded = Model::load(damaged);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().find("blk.1.ffn_up.weight_scale"), std::string::npos) << loaded.error();
  rewrite("", "blk.0.attn_k.outlier_channels");
  loaded = Model::load(damaged);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().find("ascending"), std::string::npos) << loaded.error();
  rewrite("blk.0.ffn_down.outlier_weight", "");
  EXPECT_FALSE(Model::load(damaged).ok());
  std::filesystem::remove(damaged);
  // Smoothing needs the calibration's ranges.
  q.importance = nullptr;
  q.smooth_alpha = 0.5f;
  EXPECT_FALSE(quantize_model(q, pool).ok());
}

}  // namespace
}  // namespace kestrel
