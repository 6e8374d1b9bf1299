// AVX2 build of the activation quantizers (q8_activations_impl.h): four vectors per 32-input block.
#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/q8_activations_impl.h"

namespace kestrel {
QuantizeQ8AFn quantize_q8a_kernel_avx2() { return quantize_q8a_impl<Vec256>; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx2() { return quantize_norm_q8a_impl<Vec256>; }
}  // namespace kestrel
