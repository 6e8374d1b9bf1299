#include "compute/cpu/w8a8_gemm.h"

#include <algorithm>
#include <cmath>

#include "compute/cpu/int8_dot.h"
#include "core/fp16.h"

namespace kestrel {
namespace {

constexpr size_t kRowTile = 16;     // weight rows a task walks together (their int8 rows stay in L2)
constexpr size_t kRowAlign = 64;    // int8 input rows padded to this many bytes

}  // namespace

float quantize_w8a8_input_row(const Int8Scales& scales, const float* x, size_t n, int8_t* q) {
  float scale = scales.input_scale;
  if (scale <= 0.0f) {
    // max|x| over the spans between the (ascending) outlier channels
    float amax = 0.0f;
    size_t from = 0;
    const auto span_max = [&](size_t to) {
      for (size_t i = from; i < to; ++i) amax = std::max(amax, std::fabs(x[i]));
    };
    for (const int32_t c : scales.outlier_channels) span_max(static_cast<size_t>(c)), from = static_cast<size_t>(c) + 1;
    span_max(n);
    scale = amax / 127.0f;
  }
  const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inverse), -127.0f, 127.0f));
  for (const int32_t c : scales.outlier_channels) q[c] = 0;
  return scale;
}

void matmul_w8a8(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok, bool accumulate) {
  const Int8Scales& scales = *w.int8;
  const size_t n_in = static_cast<size_t>(w.n_in), n_out = static_cast<size_t>(w.n_out);
  const size_t stride = (n_in + kRowAlign - 1) / kRowAlign * kRowAlign;
  const size_t k = scales.outlier_channels.size();
  std::vector<int8_t> xq(static_cast<size_t>(n_tok) * stride, 0);  // [n_tok, stride] 8-bit inputs
  std::vector<float> x_scale(static_cast<size_t>(n_tok));          // [n_tok]
  std::vector<float> x_outlier(static_cast<size_t>(n_tok) * k);    // [n_tok, k] the outlier channels' inputs
  pool.parallel_for(static_cast<size_t>(n_tok), 1, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const float* xt = x + t * n_in;
      x_scale[t] = quantize_w8a8_input_row(scales, xt, n_in, xq.data() + t * stride);
      for (size_t j = 0; j < k; ++j) x_outlier[t * k + j] = xt[scales.outlier_channels[j]];
    }
  });
  const DotI8Fn dot = dot_i8_kernel(detected_isa());
  pool.parallel_for(n_out, kRowTile, [&](size_t begin, size_t end, int) {
    std::vector<float> outlier_row(k);  // [k] one row's outlier weights as floats
    int32_t acc[kDotI8MaxTokens];
    for (size_t r0 = begin; r0 < end; r0 += kRowTile) {
      const size_t r1 = std::min(end, r0 + kRowTile);
      for (int t0 = 0; t0 < n_tok; t0 += kDotI8MaxTokens) {
        const int nt = std::min(kDotI8MaxTokens, n_tok - t0);
        for (size_t r = r0; r < r1; ++r) {
          dot(reinterpret_cast<const int8_t*>(w.row(static_cast<int64_t>(r))), xq.data() + static_cast<size_t>(t0) * stride,
              stride, nt, n_in, acc);
          if (k) {
            for (size_t j = 0; j < k; ++j) outlier_row[j] = fp16_to_fp32(scales.outlier_weight[r * k + j]);
          }
          for (int i = 0; i < nt; ++i) {
            const size_t t = static_cast<size_t>(t0 + i);
            float v = static_cast<float>(acc[i]) * x_scale[t] * scales.row_scale[r];
            for (size_t j = 0; j < k; ++j) v += x_outlier[t * k + j] * outlier_row[j];
            float& dst = y[t * n_out + r];
            dst = accumulate ? dst + v : v;
          }
        }
      }
    }
  });
}

}  // namespace kestrel
