#include "compute/cpu/int8_dot.h"

namespace kestrel {

#if !defined(KESTREL_HAVE_X86_KERNELS)
DotI8Fn dot_i8_kernel_avx2() { return nullptr; }
DotI8Fn dot_i8_kernel_avx512() { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
DotI8Fn dot_i8_kernel_neon() { return nullptr; }
#endif

void dot_i8_reference(const int8_t* w, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out) {
  for (int t = 0; t < n_tok; ++t) {
    const int8_t* xt = x + static_cast<size_t>(t) * x_stride;
    int32_t sum = 0;
    for (size_t i = 0; i < n; ++i) sum += int32_t{w[i]} * int32_t{xt[i]};
    out[t] = sum;
  }
}

DotI8Fn dot_i8_kernel(Isa isa) {
  DotI8Fn fn = isa_includes(isa, Isa::Avx512) ? dot_i8_kernel_avx512() : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = dot_i8_kernel_avx2();
  if (!fn && isa_includes(isa, Isa::Neon)) fn = dot_i8_kernel_neon();
  return fn ? fn : dot_i8_reference;
}

}  // namespace kestrel
