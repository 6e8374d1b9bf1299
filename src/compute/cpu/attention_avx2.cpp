// The page-wise attention kernel compiled for AVX2 + FMA + F16C (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {
struct Vec256 {
  using type = __m256;
  static constexpr int W = 8;
  static constexpr int kMaxGroup = 4;  // 2 vectors per head per tile: 8 score registers of 16
  static constexpr int kTileKeys = 16;  // keys scored per tile
  static constexpr int kValueSlices = 2;  // value slices accumulated together
  static type zero() { return _mm256_setzero_ps(); }
  static type set1(float x) { return _mm256_set1_ps(x); }
  static type load(const float* p) { return _mm256_loadu_ps(p); }
  static type load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // Lanes from two pages of 4 keys: the halves of a vector.
  static type load2(const float* p0, const float* p1) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0)), _mm_loadu_ps(p1), 1);
  }
  static type load2(const uint16_t* p0, const uint16_t* p1) {
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1))));
  }
  static void store(float* p, type v) { _mm256_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm256_add_ps(a, b); }
  static type sub(type a, type b) { return _mm256_sub_ps(a, b); }
  static type mul(type a, type b) { return _mm256_mul_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm256_fmadd_ps(a, b, c); }
  static type max(type a, type b) { return _mm256_max_ps(a, b); }
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
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx2(bool f16) { return f16 ? attend<Vec256, uint16_t> : attend<Vec256, float>; }
}  // namespace kestrel
