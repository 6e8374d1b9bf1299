// The scalar level of the row dots (compute/cpu/dot.h), which is also the reference the vector kernels are
// held to: weights decoded by the reference dequantizers; the integer path's activations as d * q, summed
// in double.
#include <vector>

#include "compute/cpu/dot.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

float dot_f32_scalar(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const float*>(row);
  float acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += w[i + k] * x[i + k];
  float s = 0;
  for (; i < n; ++i) s += w[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

// Scalar kernel for the block types: the row decoded, then dot_f32_scalar itself, so that decoding rows
// first (matmul's prefill tiles) and decoding them inside the dot (decode) give the same bits whatever the
// compiler contracts into fused multiply-adds.
template <DType kType>
float dot_blocks_scalar(const void* row, const float* x, size_t n) {
  thread_local std::vector<float> decoded;  // [n]
  decoded.resize(n);
  dequantize_row(kType, row, decoded.data(), n);
  return dot_f32_scalar(decoded.data(), x, n);
}

// Reference for the integer path: weights decoded by the reference dequantizer, activations as d * q.
template <DType kType>
void dot_q8_scalar(const void* row, const BlockQ8A* x, size_t x_stride, int n_tok, size_t n, float* out,
                   size_t out_stride) {
  std::vector<float> w(n);
  dequantize_row(kType, row, w.data(), n);
  for (int t = 0; t < n_tok; ++t) {
    const BlockQ8A* xt = x + static_cast<size_t>(t) * x_stride;
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * xt[i / 32].d * xt[i / 32].qs[i % 32];
    out[static_cast<size_t>(t) * out_stride] = static_cast<float>(s);
  }
}

}  // namespace

DotQ8Fn dot_q8_kernel_scalar(DType type) {
  switch (type) {
    case DType::Q8_0: return dot_q8_scalar<DType::Q8_0>;
    case DType::Q4_0: return dot_q8_scalar<DType::Q4_0>;
    case DType::Q4_1: return dot_q8_scalar<DType::Q4_1>;
    case DType::Q5_0: return dot_q8_scalar<DType::Q5_0>;
    case DType::Q5_1: return dot_q8_scalar<DType::Q5_1>;
    case DType::Q2_K: return dot_q8_scalar<DType::Q2_K>;
    case DType::Q3_K: return dot_q8_scalar<DType::Q3_K>;
    case DType::Q4_K: return dot_q8_scalar<DType::Q4_K>;
    case DType::Q5_K: return dot_q8_scalar<DType::Q5_K>;
    case DType::Q6_K: return dot_q8_scalar<DType::Q6_K>;
    case DType::S24_Q8: return dot_q8_scalar<DType::S24_Q8>;
    case DType::S24_Q4: return dot_q8_scalar<DType::S24_Q4>;
    default: return nullptr;
  }
}


DotFn dot_kernel_scalar(DType type) {
  switch (type) {
    case DType::F32: return dot_f32_scalar;
    case DType::F16: return dot_blocks_scalar<DType::F16>;
    case DType::BF16: return dot_blocks_scalar<DType::BF16>;
    case DType::Q8_0: return dot_blocks_scalar<DType::Q8_0>;
    case DType::Q4_0: return dot_blocks_scalar<DType::Q4_0>;
    case DType::Q4_1: return dot_blocks_scalar<DType::Q4_1>;
    case DType::Q5_0: return dot_blocks_scalar<DType::Q5_0>;
    case DType::Q5_1: return dot_blocks_scalar<DType::Q5_1>;
    case DType::Q2_K: return dot_blocks_scalar<DType::Q2_K>;
    case DType::Q3_K: return dot_blocks_scalar<DType::Q3_K>;
    case DType::Q4_K: return dot_blocks_scalar<DType::Q4_K>;
    case DType::Q5_K: return dot_blocks_scalar<DType::Q5_K>;
    case DType::Q6_K: return dot_blocks_scalar<DType::Q6_K>;
    case DType::FP8_E4M3: return dot_blocks_scalar<DType::FP8_E4M3>;
    case DType::S24_F16: return dot_blocks_scalar<DType::S24_F16>;
    case DType::S24_Q8: return dot_blocks_scalar<DType::S24_Q8>;
    case DType::S24_Q4: return dot_blocks_scalar<DType::S24_Q4>;
    default: return nullptr;  // int8 matrices go through their scales (w8a8_gemm.h)
  }
}

}  // namespace kestrel
