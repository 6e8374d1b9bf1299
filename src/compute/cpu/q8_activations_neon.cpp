// NEON build of the activation quantizers (q8_activations_impl.h): eight vectors per 32-input block.
#include "compute/cpu/simd_neon.h"
#include "compute/cpu/q8_activations_impl.h"

namespace kestrel {
QuantizeQ8AFn quantize_q8a_kernel_neon() { return quantize_q8a_impl<Vec128>; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_neon() { return quantize_norm_q8a_impl<Vec128>; }
}  // namespace kestrel
