// Row dot products: one weight row (any supported type, n elements) against a float activation vector.
// These are the decode kernels; matmul builds on them. Each ISA has a table; types an ISA does not
// specialise fall back to the next level down.
#pragma once
#include <cstddef>

#include "compute/cpu/isa.h"
#include "compute/cpu/q8_activations.h"
#include "core/dtype.h"

namespace kestrel {

// Returns sum_i w[i] * x[i] where w is `row` decoded as its type. n is a multiple of the block size.
using DotFn = float (*)(const void* row, const float* x, size_t n);

DotFn dot_kernel(DType type, Isa isa);
inline DotFn dot_kernel(DType type) { return dot_kernel(type, detected_isa()); }

// Per-ISA tables (nullptr for a type the level does not specialise).
DotFn dot_kernel_scalar(DType type);
DotFn dot_kernel_avx2(DType type);
DotFn dot_kernel_avx512(DType type);
DotFn dot_kernel_neon(DType type);

// Integer path for the quantized weight types (Q8_0, Q4_0, Q4_K, Q6_K): one weight row against the
// 8-bit-quantized activations of n_tok tokens (1..8), reading the row once.
// out[t * out_stride] = sum_i w[i] * x_t[i] for t < n_tok, where x_t = x + t * x_stride blocks.
using DotQ8Fn = void (*)(const void* row, const BlockQ8A* x, size_t x_stride, int n_tok, size_t n, float* out,
                         size_t out_stride);
constexpr int kDotQ8MaxTokens = 8;

// nullptr for a type without an integer kernel (the float types).
DotQ8Fn dot_q8_kernel(DType type, Isa isa);
inline DotQ8Fn dot_q8_kernel(DType type) { return dot_q8_kernel(type, detected_isa()); }
DotQ8Fn dot_q8_kernel_scalar(DType type);
DotQ8Fn dot_q8_kernel_avx2(DType type);
DotQ8Fn dot_q8_kernel_avx512(DType type);
DotQ8Fn dot_q8_kernel_neon(DType type);

}  // namespace kestrel
