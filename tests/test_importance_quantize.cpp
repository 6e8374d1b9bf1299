// Importance-weighted quantization (quant/importance_quantize.h) against round-to-nearest: a lower
// weighted error where weights vary, no higher plain error with equal weights, and the same block format
// (decoded by the reference dequantize_row).
#include <cmath>
#include <random>

#include "quant/importance_quantize.h"
#include "quant/quantize.h"
#include "test_support.h"

namespace kestrel {
namespace {

double weighted_error(DType t, const std::vector<float>& x, const std::vector<uint8_t>& row, const std::vector<float>& w) {
  std::vector<float> y(x.size());
  dequantize_row(t, row.data(), y.data(), x.size());
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (w.empty() ? 1.0 : w[i]) * (x[i] - y[i]) * (x[i] - y[i]);
  return e;
}

TEST(ImportanceQuantize, FitsWeightedErrorBetterThanRoundToNearest) {
  const size_t n = 8192;
  auto x = test::gaussian_vector(n, 21);
  for (size_t i = 0; i < n; i += 97) x[i] *= 6.0f;  // a few large weights, as trained matrices have
  std::mt19937 rng(22);
  std::normal_distribution<float> g(0.f, 1.5f);
  std::vector<float> w(n);  // channel importances spread over orders of magnitude
  for (auto& v : w) v = std::exp(g(rng));
  for (size_t i = 256; i < 512; ++i) w[i] = 0;  // a block no calibration token reached: equal weights
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> rtn(row_bytes(t, n)), fitted(rtn.size()), equal(rtn.size());
    quantize_row(t, x.data(), rtn.data(), n);
    quantize_row_weighted(t, x.data(), fitted.data(), n, w.data());
    quantize_row_weighted(t, x.data(), equal.data(), n, nullptr);
    const double rtn_w = weighted_error(t, x, rtn, w), fitted_w = weighted_error(t, x, fitted, w);
    const double rtn_plain = weighted_error(t, x, rtn, {}), equal_plain = weighted_error(t, x, equal, {});
    std::printf("%s: weighted error %.4g (round to nearest) -> %.4g (%.2fx); plain %.4g -> %.4g with equal weights\n",
                dtype_name(t), rtn_w, fitted_w, rtn_w / fitted_w, rtn_plain, equal_plain);
    EXPECT_LT(fitted_w, 0.85 * rtn_w);
    EXPECT_LT(equal_plain, rtn_plain);
    double ref = 0;
    for (float v : x) ref += v * v;
    const bool five_bit = t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q5_K;
    const double bound = t == DType::Q8_0 ? 0.01 : t == DType::Q6_K ? 0.04 : five_bit ? 0.08 : t == DType::Q3_K ? 0.25 : t == DType::Q2_K ? 0.45 : 0.15;
    EXPECT_LT(std::sqrt(equal_plain / ref), bound);
  }
}

TEST(ImportanceQuantize, ZeroRowsAndFloatTypes) {
  const size_t n = 256;
  const std::vector<float> zeros(n, 0.0f);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::F16}) {
    std::vector<uint8_t> row(row_bytes(t, n), 0xAB);
    quantize_row_weighted(t, zeros.data(), row.data(), n, zeros.data());
    std::vector<float> y(n, 1.0f);
    dequantize_row(t, row.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
  const auto x = test::gaussian_vector(n, 23);
  std::vector<uint8_t> a(row_bytes(DType::BF16, n)), b(a.size());
  quantize_row(DType::BF16, x.data(), a.data(), n);
  quantize_row_weighted(DType::BF16, x.data(), b.data(), n, x.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kestrel
