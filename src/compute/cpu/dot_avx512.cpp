// AVX-512 (F, BW, VL) row-dot kernels, 16 lanes. Compiled with AVX-512 flags and only called after
// run-time detection; everything has internal linkage. Types not specialised here use the AVX2 table.
#include <immintrin.h>

#include <cstdint>

#include "compute/cpu/dot.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline __m512 i8x16_to_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

float dot_f32(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const float*>(row);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  if (i + 16 <= n) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    i += 16;
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

float dot_f16(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const uint16_t*>(row);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))),
                         _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16))),
                         _mm512_loadu_ps(x + i + 16), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) s += half_to_float(w[i]) * x[i];
  return s;
}

inline __m512 bf16x16_to_ps(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

float dot_bf16(const void* row, const float* x, size_t n) {
  const auto* w = static_cast<const uint16_t*>(row);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(bf16x16_to_ps(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(bf16x16_to_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
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
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i, x += kQK) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16));
    __m512 s = _mm512_mul_ps(i8x16_to_ps(q0), _mm512_loadu_ps(x));
    s = _mm512_fmadd_ps(i8x16_to_ps(q1), _mm512_loadu_ps(x + 16), s);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(half_to_float(b[i].d)), s, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

float dot_q4_0(const void* row, const float* x, size_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(row);
  const __m128i mask = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i, x += kQK) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    __m512 s = _mm512_mul_ps(i8x16_to_ps(lo), _mm512_loadu_ps(x));
    s = _mm512_fmadd_ps(i8x16_to_ps(hi), _mm512_loadu_ps(x + 16), s);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(half_to_float(b[i].d)), s, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {
// u8 x s8 -> int32 with one VNNI instruction.
inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
}  // namespace
}  // namespace kestrel

#include "compute/cpu/dot_q8_impl.h"

namespace kestrel {

DotQ8Fn dot_q8_kernel_avx512(DType type) { return dot_q8_table(type); }

DotFn dot_kernel_avx512(DType type) {
  switch (type) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_f16;
    case DType::BF16: return dot_bf16;
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    default: return nullptr;  // Q4_K, Q6_K: the AVX2 kernels
  }
}

}  // namespace kestrel
