// Activations quantized once per matmul to 8-bit blocks, so weight rows of the quantized types can be
// dotted with integer instructions (VNNI dpbusd, or AVX2 maddubs). One block covers 32 consecutive inputs:
// x[i] ~= d * qs[i], with the sums of each 16-element half kept for the weight formats' offset terms.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/isa.h"

namespace kestrel {

struct BlockQ8A {
  float d;            // scale
  int16_t sum16[2];   // sum of qs[0..15] and of qs[16..31]
  int8_t qs[32];
  int32_t sum() const { return sum16[0] + sum16[1]; }
};
static_assert(sizeof(BlockQ8A) == 40);

// out[n / 32] <- x[n]; n a multiple of 32. Round to nearest (ties to even), d = max|x| / 127.
// The scalar reference; every ISA's kernel gives bit-identical blocks.
void quantize_activations_q8a(const float* x, BlockQ8A* out, size_t n);

using QuantizeQ8AFn = void (*)(const float* x, BlockQ8A* out, size_t n);
// The fastest kernel for this ISA level (the reference where no vector kernel exists).
QuantizeQ8AFn quantize_q8a_kernel(Isa isa);
QuantizeQ8AFn quantize_q8a_kernel_avx2();    // nullptr where not built
QuantizeQ8AFn quantize_q8a_kernel_avx512();  // nullptr where not built
QuantizeQ8AFn quantize_q8a_kernel_neon();    // nullptr where not built

// out[n / 32] <- x[n] RMS-normalised first (x / rms(x) * weight[n], eps inside the root): bit-identical to
// ops::rmsnorm then quantize_activations_q8a, which is the reference. The vector kernel reads x once and
// writes no normalised row.
void quantize_norm_activations_q8a(const float* x, const float* weight, float eps, BlockQ8A* out, size_t n);
using QuantizeNormQ8AFn = void (*)(const float* x, const float* weight, float eps, BlockQ8A* out, size_t n);
QuantizeNormQ8AFn quantize_norm_q8a_kernel(Isa isa);
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx2();    // nullptr where not built
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx512();  // nullptr where not built
QuantizeNormQ8AFn quantize_norm_q8a_kernel_neon();    // nullptr where not built

}  // namespace kestrel
