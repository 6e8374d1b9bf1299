// AVX-512 VNNI build of the int8 row dots (int8_dot.h): a register tile of up to 4 rows x 4 tokens, 64
// inputs a step. vpdpbusd multiplies unsigned by signed bytes, so each input goes in as x + 128 (its sign
// bit flipped) and 128 * sum(w) is taken off at the end (the row sums come from vpdpbusd with ones): per
// step a tile loads each row and each input once and issues one vpdpbusd per (row, token) pair plus one
// per row. The tail goes through masked loads (zero weights there, so the offset inputs add nothing).
#include <immintrin.h>

#include "compute/cpu/int8_dot.h"
#include "compute/cpu/prefetch.h"

namespace kestrel {
namespace {

template <int NR, int NT>
void dot_tile(const int8_t* w, size_t w_stride, const int8_t* x, size_t x_stride, size_t n, int32_t* out,
              const int8_t* prefetch) {
  __m512i acc[NR][NT], row_sum[NR];
  for (int r = 0; r < NR; ++r) {
    row_sum[r] = _mm512_setzero_si512();
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_si512();
  }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(1);
  const auto step = [&](auto load) {
    __m512i xu[NT];  // x + 128 as unsigned bytes
    for (int t = 0; t < NT; ++t) xu[t] = _mm512_xor_si512(load(x + t * x_stride), flip);
    for (int r = 0; r < NR; ++r) {
      const __m512i wv = load(w + r * w_stride);
      row_sum[r] = _mm512_dpbusd_epi32(row_sum[r], ones, wv);
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], xu[t], wv);
    }
  };
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if (prefetch)
      for (int r = 0; r < NR; ++r) prefetch_line(prefetch + r * w_stride + i);
    step([&](const int8_t* p) { return _mm512_loadu_si512(p + i); });
  }
  if (i < n) {
    const __mmask64 valid = (__mmask64{1} << (n - i)) - 1;
    step([&](const int8_t* p) { return _mm512_maskz_loadu_epi8(valid, p + i); });
  }
  for (int r = 0; r < NR; ++r) {
    const int32_t offset = 128 * _mm512_reduce_add_epi32(row_sum[r]);
    for (int t = 0; t < NT; ++t) out[r * kDotI8MaxTokens + t] = _mm512_reduce_add_epi32(acc[r][t]) - offset;
  }
}

template <int NR>
void dot_rows(const int8_t* w, size_t w_stride, const int8_t* x, size_t x_stride, int n_tok, size_t n, int32_t* out,
              const int8_t* prefetch) {
  switch (n_tok) {
    case 1: return dot_tile<NR, 1>(w, w_stride, x, x_stride, n, out, prefetch);
    case 2: return dot_tile<NR, 2>(w, w_stride, x, x_stride, n, out, prefetch);
    case 3: return dot_tile<NR, 3>(w, w_stride, x, x_stride, n, out, prefetch);
    default: return dot_tile<NR, 4>(w, w_stride, x, x_stride, n, out, prefetch);
  }
}

void dot_i8_avx512(const int8_t* w, size_t w_stride, int n_rows, const int8_t* x, size_t x_stride, int n_tok, size_t n,
                   int32_t* out, const int8_t* prefetch) {
  switch (n_rows) {
    case 1: return dot_rows<1>(w, w_stride, x, x_stride, n_tok, n, out, prefetch);
    case 2: return dot_rows<2>(w, w_stride, x, x_stride, n_tok, n, out, prefetch);
    case 3: return dot_rows<3>(w, w_stride, x, x_stride, n_tok, n, out, prefetch);
    default: return dot_rows<4>(w, w_stride, x, x_stride, n_tok, n, out, prefetch);
  }
}

void quantize_i8_avx512(const float* x, size_t n, float inverse, int8_t* q) {
  const __m512 scale = _mm512_set1_ps(inverse), limit = _mm512_set1_ps(127.0f), low = _mm512_set1_ps(-127.0f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 valid = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(valid, x + i), scale), low), limit);
    // half away from zero: add +-0.5 (0.5 with f's sign bit), then truncate
    const __m512 half = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(f), _mm512_set1_epi32(0x80000000),
                                                                      _mm512_castps_si512(_mm512_set1_ps(0.5f)), 0xEA));
    _mm_mask_storeu_epi8(q + i, valid, _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(_mm512_add_ps(f, half))));
  }
}

float max_abs_avx512(const float* x, size_t n) {
  __m512 m = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 valid = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(valid, x + i)));
  }
  return _mm512_reduce_max_ps(m);
}

}  // namespace

Int8Kernels int8_kernels_avx512() { return {dot_i8_avx512, quantize_i8_avx512, max_abs_avx512}; }

}  // namespace kestrel
