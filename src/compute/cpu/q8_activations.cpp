#include "compute/cpu/q8_activations.h"

namespace kestrel {

#if !defined(KESTREL_HAVE_X86_KERNELS)
QuantizeQ8AFn quantize_q8a_kernel_avx2() { return nullptr; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx2() { return nullptr; }
QuantizeQ8AFn quantize_q8a_kernel_avx512() { return nullptr; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx512() { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
QuantizeQ8AFn quantize_q8a_kernel_neon() { return nullptr; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_neon() { return nullptr; }
#endif

QuantizeQ8AFn quantize_q8a_kernel(Isa isa) {
  QuantizeQ8AFn fn = isa_includes(isa, Isa::Avx512) ? quantize_q8a_kernel_avx512() : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = quantize_q8a_kernel_avx2();
  if (!fn && isa_includes(isa, Isa::Neon)) fn = quantize_q8a_kernel_neon();
  return fn ? fn : quantize_activations_q8a;
}

QuantizeNormQ8AFn quantize_norm_q8a_kernel(Isa isa) {
  QuantizeNormQ8AFn fn = isa_includes(isa, Isa::Avx512) ? quantize_norm_q8a_kernel_avx512() : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = quantize_norm_q8a_kernel_avx2();
  if (!fn && isa_includes(isa, Isa::Neon)) fn = quantize_norm_q8a_kernel_neon();
  return fn ? fn : quantize_norm_activations_q8a;
}

}  // namespace kestrel
