// AVX-512 VNNI build of the int8 row dots (int8_dot.h): |w| (unsigned) times x with w's sign, four products
// summed into each int32 lane by vpdpbusd, 64 inputs a step; the tail through a masked load.
#include <immintrin.h>

#include "compute/cpu/int8_dot.h"

namespace kestrel {
namespace {

template <int NT>
void dot_i8(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out) {
  __m512i acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
  const __m512i zero = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 valid = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i wv = _mm512_maskz_loadu_epi8(valid, w + i);
    const __m512i w_abs = _mm512_abs_epi8(wv);
    const __mmask64 w_negative = _mm512_movepi8_mask(wv);
    for (int t = 0; t < NT; ++t) {
      const __m512i xv = _mm512_maskz_loadu_epi8(valid, x + t * x_stride + i);
      acc[t] = _mm512_dpbusd_epi32(acc[t], w_abs, _mm512_mask_sub_epi8(xv, w_negative, zero, xv));
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_epi32(acc[t]);
}

void dot_i8_avx512(const int8_t* w, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out) {
  switch (n_tok) {
    case 1: return dot_i8<1>(w, x, x_stride, n, out);
    case 2: return dot_i8<2>(w, x, x_stride, n, out);
    case 3: return dot_i8<3>(w, x, x_stride, n, out);
    default: return dot_i8<4>(w, x, x_stride, n, out);
  }
}

}  // namespace

DotI8Fn dot_i8_kernel_avx512() { return dot_i8_avx512; }

}  // namespace kestrel
