// AVX2 build of the int8 row dots (int8_dot.h): |w| (unsigned) times x with w's sign (maddubs), pairs
// widened to int32 (madd), 32 inputs a step.
#include <immintrin.h>

#include "compute/cpu/int8_dot.h"

namespace kestrel {
namespace {

int32_t reduce_add(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

template <int NT>
void dot_i8(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out) {
  __m256i acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i));
    const __m256i w_abs = _mm256_abs_epi8(wv);
    for (int t = 0; t < NT; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + t * x_stride + i));
      const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xv, wv));  // <= 2 * 127^2: no saturation
      acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(pairs, ones));
    }
  }
  for (int t = 0; t < NT; ++t) {
    int32_t sum = reduce_add(acc[t]);
    for (size_t j = i; j < n; ++j) sum += int32_t{w[j]} * int32_t{x[t * x_stride + j]};
    out[t] = sum;
  }
}

void dot_i8_avx2(const int8_t* w, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out) {
  switch (n_tok) {
    case 1: return dot_i8<1>(w, x, x_stride, n, out);
    case 2: return dot_i8<2>(w, x, x_stride, n, out);
    case 3: return dot_i8<3>(w, x, x_stride, n, out);
    default: return dot_i8<4>(w, x, x_stride, n, out);
  }
}

}  // namespace

DotI8Fn dot_i8_kernel_avx2() { return dot_i8_avx2; }

}  // namespace kestrel
