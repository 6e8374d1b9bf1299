#include "compute/cpu/w8a8_gemm.h"

#include <algorithm>
#include <cmath>

#include "compute/cpu/int8_dot.h"
#include "core/fp16.h"

namespace kestrel {
namespace {

constexpr size_t kRowTile = 16;     // weight rows a task walks together (their int8 rows stay in L2)
constexpr size_t kRowAlign = 64;    // int8 input rows padded to this many bytes
constexpr size_t kRowsAhead = 8;    // how far ahead weight rows are prefetched (on the first token group)

}  // namespace

float quantize_w8a8_input_row(const Int8Scales& scales, const float* x, size_t n, int8_t* q) {
  const Int8Kernels kernels = int8_kernels(detected_isa());
  float scale = scales.input_scale;
  if (scale <= 0.0f) {  // max|x| over the spans between the (ascending) outlier channels
    float amax = 0.0f;
    size_t from = 0;
    for (const int32_t c : scales.outlier_channels) {
      amax = std::max(amax, kernels.max_abs(x + from, static_cast<size_t>(c) - from));
      from = static_cast<size_t>(c) + 1;
    }
    scale = std::max(amax, kernels.max_abs(x + from, n - from)) / 127.0f;
  }
  kernels.quantize(x, n, scale > 0.0f ? 1.0f / scale : 0.0f, q);
  for (const int32_t c : scales.outlier_channels) q[c] = 0;
  return scale;
}

void matmul_w8a8(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok, bool accumulate) {
  const Int8Scales& scales = *w.int8;
  const size_t n_in = static_cast<size_t>(w.n_in), n_out = static_cast<size_t>(w.n_out);
  const size_t stride = (n_in + kRowAlign - 1) / kRowAlign * kRowAlign;
  const size_t k = scales.outlier_channels.size();
  // [n_tok, stride] 8-bit inputs, zero-padded. Kept between calls: a prompt's rows take megabytes, which
  // fresh allocations would have the kernel map and clear on every call.
  // (The pool's threads reach the calling thread's buffer through this reference: a thread_local named
  // inside the lambdas would be each thread's own.)
  thread_local std::vector<int8_t> kept_inputs;
  std::vector<int8_t>& xq = kept_inputs;
  xq.assign(static_cast<size_t>(n_tok) * stride, 0);
  std::vector<float> x_scale(static_cast<size_t>(n_tok));          // [n_tok]
  std::vector<float> x_outlier(static_cast<size_t>(n_tok) * k);    // [n_tok, k] the outlier channels' inputs
  pool.parallel_for(static_cast<size_t>(n_tok), 1, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const float* xt = x + t * n_in;
      x_scale[t] = quantize_w8a8_input_row(scales, xt, n_in, xq.data() + t * stride);
      for (size_t j = 0; j < k; ++j) x_outlier[t * k + j] = xt[scales.outlier_channels[j]];
    }
  });
  const DotI8Fn dot = int8_kernels(detected_isa()).dot;
  pool.parallel_for(n_out, kRowTile, [&](size_t begin, size_t end, int) {
    std::vector<float> outlier_row(k);  // [k] one row's outlier weights as floats
    int32_t acc[kDotI8MaxRows * kDotI8MaxTokens];
    for (size_t r0 = begin; r0 < end; r0 += kRowTile) {
      const size_t r1 = std::min(end, r0 + kRowTile);
      for (int t0 = 0; t0 < n_tok; t0 += kDotI8MaxTokens) {
        const int nt = std::min(kDotI8MaxTokens, n_tok - t0);
        for (size_t r = r0; r < r1; r += kDotI8MaxRows) {
          const int nr = static_cast<int>(std::min<size_t>(kDotI8MaxRows, r1 - r));
          const size_t ahead = r + kRowsAhead;  // rows streamed later, on the first token group
          const int8_t* prefetch = t0 == 0 && ahead + static_cast<size_t>(nr) <= end
                                       ? reinterpret_cast<const int8_t*>(w.row(static_cast<int64_t>(ahead)))
                                       : nullptr;
          dot(reinterpret_cast<const int8_t*>(w.row(static_cast<int64_t>(r))), w.row_bytes, nr,
              xq.data() + static_cast<size_t>(t0) * stride, stride, nt, n_in, acc, prefetch);
          for (int ir = 0; ir < nr; ++ir) {
            const size_t row = r + static_cast<size_t>(ir);
            for (size_t j = 0; j < k; ++j) outlier_row[j] = fp16_to_fp32(scales.outlier_weight[row * k + j]);
            for (int i = 0; i < nt; ++i) {
              const size_t t = static_cast<size_t>(t0 + i);
              float v = static_cast<float>(acc[ir * kDotI8MaxTokens + i]) * x_scale[t] * scales.row_scale[row];
              for (size_t j = 0; j < k; ++j) v += x_outlier[t * k + j] * outlier_row[j];
              float& dst = y[t * n_out + row];
              dst = accumulate ? dst + v : v;
            }
          }
        }
      }
    }
  });
}

}  // namespace kestrel
