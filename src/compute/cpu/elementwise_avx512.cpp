// AVX-512 elementwise kernels (see elementwise.h).
#include <immintrin.h>

#include "compute/cpu/elementwise.h"
#include "compute/cpu/exp_avx512.h"

namespace kestrel {
namespace {

// silu(x) * u with e = exp(-|x|) <= 1: x / (1 + e) for x >= 0, x * e / (1 + e) below (no overflow).
void silu_mul_avx512(float* gate, const float* up, size_t n) {
  size_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  auto step = [&](__mmask16 mask) {
    const __m512 x = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
    const __m512 e = exp_nonpositive_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 numerator = _mm512_mask_mul_ps(x, negative, x, e);
    const __m512 silu = _mm512_div_ps(numerator, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(gate + i, mask, _mm512_mul_ps(silu, u));
  };
  for (; i + 16 <= n; i += 16) step(0xFFFF);
  if (i < n) step(static_cast<__mmask16>((1u << (n - i)) - 1));
}

}  // namespace

SiluMulFn silu_mul_kernel_avx512() { return silu_mul_avx512; }

}  // namespace kestrel
