// AVX-512 build of the activation quantizers (see q8_activations.h): two vectors per 32-input block.
#include <immintrin.h>

#include <cmath>

#include "compute/cpu/q8_activations.h"

namespace kestrel {
namespace {

// One block from its 32 values (lo: the first 16, hi: the rest).
inline void quantize_block(__m512 lo, __m512 hi, BlockQ8A& o) {
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
  const float d = amax / 127.f, id = d > 0 ? 127.f / amax : 0.f;
  // Round to nearest even, as the reference's nearbyint under the default rounding mode.
  const __m512i qlo = _mm512_cvt_roundps_epi32(_mm512_mul_ps(lo, _mm512_set1_ps(id)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i qhi = _mm512_cvt_roundps_epi32(_mm512_mul_ps(hi, _mm512_set1_ps(id)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  o.d = d;
  o.sum16[0] = static_cast<int16_t>(_mm512_reduce_add_epi32(qlo));
  o.sum16[1] = static_cast<int16_t>(_mm512_reduce_add_epi32(qhi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs), _mm512_cvtsepi32_epi8(qlo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs + 16), _mm512_cvtsepi32_epi8(qhi));
}

void quantize_q8a_avx512(const float* x, BlockQ8A* out, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) quantize_block(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), out[b]);
}

void quantize_norm_q8a_avx512(const float* x, const float* weight, float eps, BlockQ8A* out, size_t n) {
  // Sum of squares as ops::rmsnorm: in double, lane k summing x[i] for i = k mod 8 in order (each product
  // of two floats is exact in double, so the fused multiply-add rounds as the reference's add).
  // The norm weights were last read a whole decode step ago: request them now, so they arrive while the
  // sum of squares runs instead of one stall after another in the quantizing loop.
  for (size_t i = 0; i < n; i += 16) _mm_prefetch(reinterpret_cast<const char*>(weight + i), _MM_HINT_T0);
  __m512d part = _mm512_setzero_pd();
  for (size_t i = 0; i < n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    part = _mm512_fmadd_pd(v, v, part);
  }
  alignas(64) double p[8];
  _mm512_store_pd(p, part);
  const double ss = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps));
  for (size_t b = 0; b < n / 32; ++b, x += 32, weight += 32)
    quantize_block(_mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x), scale), _mm512_loadu_ps(weight)),
                   _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16), scale), _mm512_loadu_ps(weight + 16)), out[b]);
}

}  // namespace

QuantizeQ8AFn quantize_q8a_kernel_avx512() { return quantize_q8a_avx512; }
QuantizeNormQ8AFn quantize_norm_q8a_kernel_avx512() { return quantize_norm_q8a_avx512; }

}  // namespace kestrel
