// Elementwise kernels with a per-ISA build: SwiGLU's gate activation. The scalar reference is the spec.
#pragma once
#include <cstddef>

#include "compute/cpu/isa.h"

namespace kestrel {

// gate[n] = silu(gate[n]) * up[n], silu(x) = x / (1 + exp(-x)).
using SiluMulFn = void (*)(float* gate, const float* up, size_t n);
void silu_mul_reference(float* gate, const float* up, size_t n);
SiluMulFn silu_mul_kernel(Isa isa);  // the reference where no vector kernel exists
SiluMulFn silu_mul_kernel_avx2();    // nullptr where not built
SiluMulFn silu_mul_kernel_avx512();  // nullptr where not built
SiluMulFn silu_mul_kernel_neon();    // nullptr where not built

}  // namespace kestrel
