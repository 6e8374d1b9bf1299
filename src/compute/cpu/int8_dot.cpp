#include "compute/cpu/int8_dot.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

#if !defined(KESTREL_HAVE_X86_KERNELS)
Int8Kernels int8_kernels_avx2() { return {}; }
Int8Kernels int8_kernels_avx512() { return {}; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
Int8Kernels int8_kernels_neon() { return {}; }
#endif

void quantize_i8_reference(const float* x, size_t n, float inverse, int8_t* q) {
  for (size_t i = 0; i < n; ++i) {
    const float v = std::clamp(x[i] * inverse, -127.0f, 127.0f);
    q[i] = static_cast<int8_t>(static_cast<int>(v + (v < 0.0f ? -0.5f : 0.5f)));
  }
}

float max_abs_reference(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void dot_i8_reference(const int8_t* w, size_t w_stride, int n_rows, const int8_t* x, size_t x_stride, int n_tok,
                      size_t n, int32_t* out, const int8_t*) {
  for (int r = 0; r < n_rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      const int8_t* wr = w + static_cast<size_t>(r) * w_stride;
      const int8_t* xt = x + static_cast<size_t>(t) * x_stride;
      int32_t sum = 0;
      for (size_t i = 0; i < n; ++i) sum += int32_t{wr[i]} * int32_t{xt[i]};
      out[r * kDotI8MaxTokens + t] = sum;
    }
}

Int8Kernels int8_kernels(Isa isa) {
  Int8Kernels k = isa_includes(isa, Isa::Avx512) ? int8_kernels_avx512() : Int8Kernels{};
  if (!k.dot && isa_includes(isa, Isa::Avx2)) k = int8_kernels_avx2();
  if (!k.dot && isa_includes(isa, Isa::Neon)) k = int8_kernels_neon();
  if (!k.dot) k.dot = dot_i8_reference;
  if (!k.quantize) k.quantize = quantize_i8_reference;
  if (!k.max_abs) k.max_abs = max_abs_reference;
  return k;
}

}  // namespace kestrel
