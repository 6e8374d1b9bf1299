// AVX-512 build of the activation quantizer (see q8_activations.h): two vectors per 32-input block.
#include <immintrin.h>

#include "compute/cpu/q8_activations.h"

namespace kestrel {
namespace {

void quantize_q8a_avx512(const float* x, BlockQ8A* out, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float d = amax / 127.f, id = d > 0 ? 127.f / amax : 0.f;
    // Round to nearest even, as the reference's nearbyint under the default rounding mode.
    const __m512i qlo = _mm512_cvt_roundps_epi32(_mm512_mul_ps(lo, _mm512_set1_ps(id)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i qhi = _mm512_cvt_roundps_epi32(_mm512_mul_ps(hi, _mm512_set1_ps(id)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    BlockQ8A& o = out[b];
    o.d = d;
    o.sum16[0] = static_cast<int16_t>(_mm512_reduce_add_epi32(qlo));
    o.sum16[1] = static_cast<int16_t>(_mm512_reduce_add_epi32(qhi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs), _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.qs + 16), _mm512_cvtsepi32_epi8(qhi));
  }
}

}  // namespace

QuantizeQ8AFn quantize_q8a_kernel_avx512() { return quantize_q8a_avx512; }

}  // namespace kestrel
