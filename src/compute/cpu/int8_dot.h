// Integer row dots for W8A8 (compute/cpu/w8a8_gemm.h): a tile of up to kDotI8MaxRows int8 weight rows
// against the int8 activations of up to kDotI8MaxTokens tokens, each row and input read once. Values lie in [-127, 127] (never -128), so the
// kernels may take |w| as unsigned and move w's sign onto x. The reference is the spec.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/isa.h"

namespace kestrel {

// out[r * kDotI8MaxTokens + t] = sum_{i < n} w[r * w_stride + i] * x[t * x_stride + i] for r < n_rows
// (1..kDotI8MaxRows), t < n_tok (1..kDotI8MaxTokens); any n. prefetch: the n_rows rows (same stride) the
// caller reads next, fetched into cache a line of each per 64 inputs; null: none.
using DotI8Fn = void (*)(const int8_t* w, size_t w_stride, int n_rows, const int8_t* x, size_t x_stride, int n_tok,
                         size_t n, int32_t* out, const int8_t* prefetch);
constexpr int kDotI8MaxRows = 4;
constexpr int kDotI8MaxTokens = 4;

// q[i] = x[i] * inverse rounded half away from zero and clamped to +-127; returns nothing. And max|x[i]|.
// The activation side of W8A8 (w8a8_gemm.h quantizes every input row with them).
using QuantizeI8Fn = void (*)(const float* x, size_t n, float inverse, int8_t* q);
using MaxAbsFn = float (*)(const float* x, size_t n);
struct Int8Kernels {
  DotI8Fn dot;
  QuantizeI8Fn quantize;
  MaxAbsFn max_abs;
};

void quantize_i8_reference(const float* x, size_t n, float inverse, int8_t* q);
float max_abs_reference(const float* x, size_t n);
Int8Kernels int8_kernels(Isa isa);  // the references where no vector kernel exists
Int8Kernels int8_kernels_avx2();    // null members where not built
Int8Kernels int8_kernels_avx512();
Int8Kernels int8_kernels_neon();

void dot_i8_reference(const int8_t* w, size_t w_stride, int n_rows, const int8_t* x, size_t x_stride, int n_tok,
                      size_t n, int32_t* out, const int8_t* prefetch);
}  // namespace kestrel
