// AVX2 + FMA + F16C row-dot kernels. This file is compiled with -mavx2 -mfma -mf16c and only called
// after run-time detection; everything in it has internal linkage so no AVX2 code leaks into
// functions the linker could pick for a baseline caller.
#include <immintrin.h>

#include <cstdint>

#include "compute/cpu/dot.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {
// u8 x s8 -> int32 via maddubs (pairs to int16; |pair sum| <= 2 * 255 * 127 fits) and madd with ones.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
}  // namespace
}  // namespace kestrel

#include "compute/cpu/dot_q8_impl.h"

namespace kestrel {
namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

float dot_f32(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const float*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

float dot_f16(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const uint16_t*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i))),
                         _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8))),
                         _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = hsum_ps(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += half_to_float(w[i]) * x[i];
  return s;
}

inline __m256 bf16x8_to_ps(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

float dot_bf16(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const uint16_t*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(bf16x8_to_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(bf16x8_to_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = hsum_ps(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    s += f * x[i];
  }
  return s;
}

float dot_q8_0(const void* row, const float* x, size_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i, x += kQK) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16));
    __m256 s = _mm256_mul_ps(i8x8_to_ps(q0), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(q0, 8)), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(i8x8_to_ps(q1), _mm256_loadu_ps(x + 16), s);
    s = _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(q1, 8)), _mm256_loadu_ps(x + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b[i].d)), s, acc);
  }
  return hsum_ps(acc);
}

float dot_q4_0(const void* row, const float* x, size_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(row);
  const __m128i mask = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i, x += kQK) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);                     // elements 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);  // elements 16..31
    __m256 s = _mm256_mul_ps(i8x8_to_ps(lo), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(i8x8_to_ps(hi), _mm256_loadu_ps(x + 16), s);
    s = _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(x + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b[i].d)), s, acc);
  }
  return hsum_ps(acc);
}

float dot_q4_k(const void* row, const float* x, size_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(row);
  const __m256i mask = _mm256_set1_epi32(0xF);
  float total = 0;
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
    const uint8_t* q = b[i].qs;
    __m256 acc = _mm256_setzero_ps();
    __m256 acc_min = _mm256_setzero_ps();
    for (int pair = 0; pair < 4; ++pair, q += 32, x += 64) {
      uint8_t sc1, m1, sc2, m2;
      q4_k_scale_min(2 * pair, b[i].scales, sc1, m1);
      q4_k_scale_min(2 * pair + 1, b[i].scales, sc2, m2);
      __m256 s_lo = _mm256_setzero_ps(), s_hi = _mm256_setzero_ps(), x_lo = _mm256_setzero_ps(),
             x_hi = _mm256_setzero_ps();
      for (int g = 0; g < 4; ++g) {
        const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * g)));
        const __m256 xl = _mm256_loadu_ps(x + 8 * g), xh = _mm256_loadu_ps(x + 32 + 8 * g);
        s_lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(bytes, mask)), xl, s_lo);
        s_hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4)), xh, s_hi);
        x_lo = _mm256_add_ps(x_lo, xl);
        x_hi = _mm256_add_ps(x_hi, xh);
      }
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1), s_lo, acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc2), s_hi, acc);
      acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m1), x_lo, acc_min);
      acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m2), x_hi, acc_min);
    }
    total += hsum_ps(_mm256_sub_ps(acc, acc_min));
  }
  return total;
}

float dot_q6_k(const void* row, const float* x, size_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(row);
  const __m256i m4 = _mm256_set1_epi32(0xF), m2 = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = half_to_float(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, x += 128) {
      for (int g = 0; g < 4; ++g) {  // elements l = 8g .. 8g+7 of each quarter
        const int l = 8 * g, is = l / 16;
        const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l)));
        const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l + 32)));
        const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + l)));
        const __m256i q1 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(h, m2), 4)), off);
        const __m256i q2 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_and_si256(c, m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), m2), 4)), off);
        const __m256i q3 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_srli_epi32(a, 4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), m2), 4)), off);
        const __m256i q4 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_srli_epi32(c, 4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 6), m2), 4)), off);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d * sc[is + 0]), _mm256_cvtepi32_ps(q1)),
                              _mm256_loadu_ps(x + l), acc);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d * sc[is + 2]), _mm256_cvtepi32_ps(q2)),
                              _mm256_loadu_ps(x + l + 32), acc);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d * sc[is + 4]), _mm256_cvtepi32_ps(q3)),
                              _mm256_loadu_ps(x + l + 64), acc);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(d * sc[is + 6]), _mm256_cvtepi32_ps(q4)),
                              _mm256_loadu_ps(x + l + 96), acc);
      }
    }
  }
  return hsum_ps(acc);
}

}  // namespace

DotQ8Fn dot_q8_kernel_avx2(DType type) { return dot_q8_table(type); }

DotFn dot_kernel_avx2(DType type) {
  switch (type) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_f16;
    case DType::BF16: return dot_bf16;
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_K: return dot_q4_k;
    case DType::Q6_K: return dot_q6_k;
  }
  return nullptr;
}

}  // namespace kestrel
