// Integer row dots for W8A8 (compute/cpu/w8a8_gemm.h): one int8 weight row against the int8 activations
// of up to kDotI8MaxTokens tokens, reading the row once. Values lie in [-127, 127] (never -128), so the
// kernels may take |w| as unsigned and move w's sign onto x. The reference is the spec.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/isa.h"

namespace kestrel {

// out[t] = sum_{i < n} w[i] * x[t * x_stride + i] for t < n_tok (1..kDotI8MaxTokens); any n.
using DotI8Fn = void (*)(const int8_t* w, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out);
constexpr int kDotI8MaxTokens = 4;

void dot_i8_reference(const int8_t* w, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out);
DotI8Fn dot_i8_kernel(Isa isa);  // the reference where no vector kernel exists
DotI8Fn dot_i8_kernel_avx2();    // nullptr where not built
DotI8Fn dot_i8_kernel_avx512();  // nullptr where not built
DotI8Fn dot_i8_kernel_neon();    // nullptr where not built

}  // namespace kestrel
