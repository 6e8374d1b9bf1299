// The page-wise attention kernel compiled for AVX-512 (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {
struct Vec512 {
  using type = __m512;
  static constexpr int W = 16;
  static constexpr int kMaxGroup = 8;
  static type zero() { return _mm512_setzero_ps(); }
  static type set1(float x) { return _mm512_set1_ps(x); }
  static type load(const float* p) { return _mm512_loadu_ps(p); }
  static type load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(float* p, type v) { _mm512_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm512_add_ps(a, b); }
  static type sub(type a, type b) { return _mm512_sub_ps(a, b); }
  static type mul(type a, type b) { return _mm512_mul_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
  static type max(type a, type b) { return _mm512_max_ps(a, b); }
  static float reduce_max(type v) { return _mm512_reduce_max_ps(v); }
  static float reduce_add(type v) { return _mm512_reduce_add_ps(v); }
  static type exp(type x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const type t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
    const type n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const type f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147181f));
    type p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx512(bool f16) { return f16 ? attend<Vec512, uint16_t> : attend<Vec512, float>; }
}  // namespace kestrel
