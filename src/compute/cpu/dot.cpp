#include "compute/cpu/dot.h"

namespace kestrel {
#if !defined(KESTREL_HAVE_X86_KERNELS)
DotFn dot_kernel_avx2(DType) { return nullptr; }
DotFn dot_kernel_avx512(DType) { return nullptr; }
DotQ8Fn dot_q8_kernel_avx2(DType) { return nullptr; }
DotQ8Fn dot_q8_kernel_avx512(DType) { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
DotFn dot_kernel_neon(DType) { return nullptr; }
DotQ8Fn dot_q8_kernel_neon(DType) { return nullptr; }
#endif

DotQ8Fn dot_q8_kernel(DType type, Isa isa) {
  DotQ8Fn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = dot_q8_kernel_avx512(type);
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = dot_q8_kernel_avx2(type);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = dot_q8_kernel_neon(type);
  if (!fn) fn = dot_q8_kernel_scalar(type);
  return fn;
}

DotFn dot_kernel(DType type, Isa isa) {
  DotFn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = dot_kernel_avx512(type);
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = dot_kernel_avx2(type);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = dot_kernel_neon(type);
  if (!fn) fn = dot_kernel_scalar(type);
  return fn;
}

}  // namespace kestrel
