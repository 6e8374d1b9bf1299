// AVX2 build of the int8 row dots (int8_dot.h): |w| (unsigned) times x with w's sign (maddubs), pairs
// widened to int32 (madd), 32 inputs a step.
#include <immintrin.h>

#include <algorithm>

#include "compute/cpu/int8_dot_rows.h"
#include "compute/cpu/prefetch.h"

namespace kestrel {
namespace {

int32_t reduce_add(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

template <int NT>
struct RowDot {
  static void dot(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out, const int8_t* prefetch);
};

template <int NT>
void RowDot<NT>::dot(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out, const int8_t* prefetch) {
  __m256i acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (prefetch && i % 64 == 0) prefetch_line(prefetch + i);
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

void quantize_i8_avx2(const float* x, size_t n, float inverse, int8_t* q) {
  const __m256 scale = _mm256_set1_ps(inverse), limit = _mm256_set1_ps(127.0f), sign = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), scale), _mm256_sub_ps(_mm256_setzero_ps(), limit)), limit);
      v[j] = _mm256_cvttps_epi32(_mm256_add_ps(f, _mm256_or_ps(half, _mm256_and_ps(f, sign))));  // half away from zero
    }
    const __m256i w16 = _mm256_packs_epi32(v[0], v[1]), z16 = _mm256_packs_epi32(v[2], v[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, z16), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), b);
  }
  quantize_i8_reference(x + i, n - i, inverse, q + i);
}

float max_abs_avx2(const float* x, size_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return std::max(_mm_cvtss_f32(h), max_abs_reference(x + i, n - i));
}

}  // namespace

Int8Kernels int8_kernels_avx2() { return {dot_i8_row_by_row<RowDot>, quantize_i8_avx2, max_abs_avx2}; }

}  // namespace kestrel
