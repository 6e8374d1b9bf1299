// Vec256: 8 float lanes of AVX2 + FMA + F16C, the vector interface the single-source kernels
// (`*_impl.h`) are written against. Include only from files compiled for AVX2; internal linkage.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {

struct Vec256 {
  using type = __m256;
  using itype = __m256i;  // 8 int32 lanes
  static constexpr int W = 8;
  static type zero() { return _mm256_setzero_ps(); }
  static type set1(float x) { return _mm256_set1_ps(x); }
  static type load(const float* p) { return _mm256_loadu_ps(p); }
  static type load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static type load_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  // Lanes from two pages of 4 keys: the halves of a vector.
  static type load2(const float* p0, const float* p1) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0)), _mm_loadu_ps(p1), 1);
  }
  static type load2(const uint16_t* p0, const uint16_t* p1) {
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1))));
  }
  static type set2(float low, float high) {  // low in the lower half's lanes, high in the upper half's
    return _mm256_insertf128_ps(_mm256_set1_ps(low), _mm_set1_ps(high), 1);
  }
  static void store(float* p, type v) { _mm256_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm256_add_ps(a, b); }
  static type sub(type a, type b) { return _mm256_sub_ps(a, b); }
  static type mul(type a, type b) { return _mm256_mul_ps(a, b); }
  static type div(type a, type b) { return _mm256_div_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm256_fmadd_ps(a, b, c); }
  static type max(type a, type b) { return _mm256_max_ps(a, b); }
  static type abs(type a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  // a where x >= 0, b where x < 0.
  static type select_negative(type x, type a, type b) { return _mm256_blendv_ps(a, b, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ)); }
  static float reduce_max(type v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float reduce_add(type v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // exp(x) for x <= 0 within ~2e-7 relative: 2^(x log2 e) as an integer power of two times a degree-6
  // polynomial on [-0.5, 0.5].
  static type exp(type x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const type t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504f));
    const type n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const type f = _mm256_mul_ps(_mm256_sub_ps(t, n), _mm256_set1_ps(0.693147181f));
    type p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
  }
  // Round to nearest, ties to even (the default rounding mode), as nearbyint.
  static itype round_to_int(type v) { return _mm256_cvtps_epi32(v); }
  static int32_t reduce_add(itype v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
  // The lanes as int8 (each within -128..127).
  static void store_int8(int8_t* p, itype v) {
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w16, w16));
  }
  // part[k] += x[i]^2 in double over i = k mod 8, in order (n a multiple of 8).
  static void sum_squares8(const float* x, size_t n, double* part) {
    __m256d lo = _mm256_loadu_pd(part), hi = _mm256_loadu_pd(part + 4);
    for (size_t i = 0; i < n; i += 8) {
      const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
      lo = _mm256_fmadd_pd(a, a, lo);
      hi = _mm256_fmadd_pd(b, b, hi);
    }
    _mm256_storeu_pd(part, lo);
    _mm256_storeu_pd(part + 4, hi);
  }
};

}  // namespace
}  // namespace kestrel
