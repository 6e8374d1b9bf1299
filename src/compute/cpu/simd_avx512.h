// Vec512: 16 float lanes of AVX-512 (F, BW, VL), the vector interface the single-source kernels
// (`*_impl.h`) are written against. Include only from files compiled for AVX-512; internal linkage.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {

struct Vec512 {
  using type = __m512;
  using itype = __m512i;  // 16 int32 lanes
  static constexpr int W = 16;
  static type zero() { return _mm512_setzero_ps(); }
  static type set1(float x) { return _mm512_set1_ps(x); }
  static type load(const float* p) { return _mm512_loadu_ps(p); }
  static type load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static type load_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  // Lanes from two (load2) or four (load4) pages: halves / quarters of a vector.
  static type load2(const float* p0, const float* p1) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(p0))),
                                               _mm256_castps_pd(_mm256_loadu_ps(p1)), 1));
  }
  static type load4(const float* p0, const float* p1, const float* p2, const float* p3) {
    __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(p0));
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p1), 1);
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p2), 2);
    return _mm512_insertf32x4(v, _mm_loadu_ps(p3), 3);
  }
  static type load2(const uint16_t* p0, const uint16_t* p1) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
  }
  static type load4(const uint16_t* p0, const uint16_t* p1, const uint16_t* p2, const uint16_t* p3) {
    const __m128i a = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)));
    const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p2)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p3)));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
  }
  static type set2(float low, float high) {  // low in the lower half's lanes, high in the upper half's
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(low)), _mm256_castps_pd(_mm256_set1_ps(high)), 1));
  }
  static void store(float* p, type v) { _mm512_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm512_add_ps(a, b); }
  static type sub(type a, type b) { return _mm512_sub_ps(a, b); }
  static type mul(type a, type b) { return _mm512_mul_ps(a, b); }
  static type div(type a, type b) { return _mm512_div_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
  static type max(type a, type b) { return _mm512_max_ps(a, b); }
  static type abs(type a) { return _mm512_abs_ps(a); }
  // a where x >= 0, b where x < 0.
  static type select_negative(type x, type a, type b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), a, b);
  }
  static float reduce_max(type v) { return _mm512_reduce_max_ps(v); }
  static float reduce_add(type v) { return _mm512_reduce_add_ps(v); }
  // exp(x) for x <= 0 within ~2e-7 relative: 2^(x log2 e) as an integer power of two (vscalefps) times a
  // degree-6 polynomial on [-0.5, 0.5].
  static type exp(type x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147181f));
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
  // Round to nearest, ties to even, as nearbyint.
  static itype round_to_int(type v) { return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static int32_t reduce_add(itype v) { return _mm512_reduce_add_epi32(v); }
  static void store_int8(int8_t* p, itype v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(v)); }
  // part[k] += x[i]^2 in double over i = k mod 8, in order (n a multiple of 8).
  static void sum_squares8(const float* x, size_t n, double* part) {
    __m512d acc = _mm512_loadu_pd(part);
    for (size_t i = 0; i < n; i += 8) {
      const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
      acc = _mm512_fmadd_pd(v, v, acc);
    }
    _mm512_storeu_pd(part, acc);
  }
};

}  // namespace
}  // namespace kestrel
