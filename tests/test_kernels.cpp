// Every fast kernel against its scalar reference, on seeded random inputs, on every ISA level this CPU
// runs; and the reference quantizers against the formats' error bounds.
#include <cmath>
#include <random>

#include "compute/cpu/dot.h"
#include "compute/ref/ref_ops.h"
#include "core/fp16.h"
#include "quant/quantize.h"
#include "test_support.h"

namespace kestrel {
namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantized(DType type, const std::vector<float>& values, size_t n_in) {
  std::vector<uint8_t> bytes(row_bytes(type, n_in) * (values.size() / n_in));
  for (size_t r = 0; r < values.size() / n_in; ++r)
    quantize_row(type, values.data() + r * n_in, bytes.data() + r * row_bytes(type, n_in), n_in);
  return bytes;
}

TEST(Kernels, DotMatchesReferenceOnEveryIsa) {
  for (Isa isa : runnable_isas()) {
    for (DType type : kTypes) {
      for (size_t n : {256u, 512u, 2048u, 5632u}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(type) + " n=" + std::to_string(n));
        const auto w = random_vector(n, 1 + static_cast<uint32_t>(n), 0.05f);
        const auto x = random_vector(n, 7);
        const auto bytes = quantized(type, w, n);
        const double want = ref::dot(type, bytes.data(), x.data(), n);
        const float got = dot_kernel(type, isa)(bytes.data(), x.data(), n);
        // Float accumulation order differs: allow a relative error of the sum of |terms|.
        std::vector<float> decoded(n);
        dequantize_row(type, bytes.data(), decoded.data(), n);
        double magnitude = 0;
        for (size_t i = 0; i < n; ++i) magnitude += std::fabs(decoded[i] * x[i]);
        EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-6);
      }
    }
  }
}

TEST(Kernels, F32DotHandlesOddLengths) {
  for (Isa isa : runnable_isas())
    for (size_t n : {1u, 7u, 15u, 17u, 33u, 100u}) {
      const auto w = random_vector(n, 3), x = random_vector(n, 4);
      const double want = ref::dot(DType::F32, w.data(), x.data(), n);
      EXPECT_NEAR(dot_kernel(DType::F32, isa)(w.data(), x.data(), n), want, 1e-4) << isa_name(isa) << " n=" << n;
    }
}

TEST(Kernels, MatmulMatchesReference) {
  ThreadPool pool(2);
  for (DType type : kTypes) {
    for (int n_tok : {1, 3, 9, 33}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " n_tok=" + std::to_string(n_tok));
      const size_t n_in = 512, n_out = 70;
      const auto w = random_vector(n_in * n_out, 11, 0.05f);
      const auto bytes = quantized(type, w, n_in);
      WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
      const auto x = random_vector(n_in * n_tok, 12);
      std::vector<float> got(n_out * n_tok), want(n_out * n_tok);
      ops::matmul(pool, m, x.data(), got.data(), n_tok);
      ref::matmul(m, x.data(), want.data(), n_tok);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-4) << i;
    }
  }
}

TEST(Kernels, PagedAttentionMatchesFullSoftmax) {
  ThreadPool pool(2);
  const int n_heads = 8, n_kv = 2, hd = 32, bs = 4, n_blocks = 12;
  std::vector<float> k = random_vector(static_cast<size_t>(n_blocks) * n_kv * bs * hd, 21);
  std::vector<float> v = random_vector(k.size(), 22);
  KvLayerView kv{k.data(), v.data(), bs, n_kv, hd, hd, hd};
  // Two sequences with scattered, non-contiguous pages, attending at different positions.
  const std::vector<int32_t> table_a = {7, 2, 9, 0, 5}, table_b = {1, 11, 3};
  const std::vector<int32_t> positions = {0, 5, 17, 19, 3, 10};
  const std::vector<const int32_t*> tables = {table_a.data(), table_a.data(), table_a.data(), table_a.data(),
                                              table_b.data(), table_b.data()};
  const AttentionRows rows{positions, tables};
  const int n_tok = static_cast<int>(positions.size());
  const auto q = random_vector(static_cast<size_t>(n_tok) * n_heads * hd, 23);
  std::vector<float> got(q.size()), want(q.size());
  ops::attention_paged(pool, q.data(), kv, rows, got.data(), n_tok, n_heads, 0.2f);
  ref::attention(q.data(), kv, rows, want.data(), n_tok, n_heads, 0.2f);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(Kernels, LatentAttentionWithValueInsideKeyRows) {
  // MLA layout: one cached row per token of k_dim floats whose first v_dim floats are the value.
  ThreadPool pool(2);
  const int n_heads = 4, k_dim = 80, v_dim = 64, bs = 16, n_blocks = 3;
  std::vector<float> k = random_vector(static_cast<size_t>(n_blocks) * bs * k_dim, 31);
  KvLayerView kv{k.data(), k.data(), bs, 1, k_dim, v_dim, k_dim};
  const std::vector<int32_t> table = {2, 0, 1};
  const std::vector<int32_t> positions = {0, 15, 16, 40};
  const std::vector<const int32_t*> tables(positions.size(), table.data());
  const AttentionRows rows{positions, tables};
  const int n_tok = static_cast<int>(positions.size());
  const auto q = random_vector(static_cast<size_t>(n_tok) * n_heads * k_dim, 32, 0.2f);
  std::vector<float> got(static_cast<size_t>(n_tok) * n_heads * v_dim), want(got.size());
  ops::attention_paged(pool, q.data(), kv, rows, got.data(), n_tok, n_heads, 0.125f);
  ref::attention(q.data(), kv, rows, want.data(), n_tok, n_heads, 0.125f);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(Quantize, RoundTripErrorWithinFormatBounds) {
  const size_t n = 4096;
  const auto x = random_vector(n, 5, 1.0f);
  // Relative RMS error bounds for Gaussian data, generous versions of the formats' typical figures.
  const std::pair<DType, double> bounds[] = {{DType::F32, 0},      {DType::F16, 1e-3},  {DType::BF16, 5e-3},
                                             {DType::Q8_0, 0.01},  {DType::Q4_0, 0.15}, {DType::Q4_K, 0.12},
                                             {DType::Q6_K, 0.04}};
  for (const auto& [type, bound] : bounds) {
    const auto bytes = quantized(type, x, n);
    std::vector<float> y(n);
    dequantize_row(type, bytes.data(), y.data(), n);
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      ref += x[i] * x[i];
    }
    EXPECT_LE(std::sqrt(err / ref), bound) << dtype_name(type);
    if (type != DType::F32) EXPECT_GT(std::sqrt(err / ref), 0.0) << dtype_name(type) << " should be lossy";
  }
}

TEST(Quantize, HalfPrecisionConversions) {
  for (float f : {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 3.14159f}) {
    EXPECT_NEAR(fp16_to_fp32(fp32_to_fp16(f)), f, std::fabs(f) * 1e-3 + 1e-7);
    EXPECT_NEAR(bf16_to_fp32(fp32_to_bf16(f)), f, std::fabs(f) * 8e-3);
  }
  EXPECT_TRUE(std::isinf(fp16_to_fp32(fp32_to_fp16(1e6f))));
  // Every fp16 value survives fp16 -> fp32 -> fp16 exactly (NaNs stay NaN).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

}  // namespace
}  // namespace kestrel
