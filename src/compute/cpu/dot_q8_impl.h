// Integer dot kernels (quantized weight row x 8-bit activations of up to 8 tokens), written once and
// compiled per ISA: included only by the ISA files, after they define, in an anonymous namespace,
//   __m256i dot_u8s8(__m256i u, __m256i s);  // int32 x 8: each lane sums 4 adjacent u8 * s8 products
// Everything here has internal linkage, so each ISA file gets its own copy.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "compute/cpu/dot.h"
#include "compute/cpu/dot_q8_dispatch.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Q8_0: signed weights; |w| * (x with w's sign) keeps the first operand unsigned.
template <int NT>
void q8_0_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i) {
    const __m256i w = load256(b[i].qs);
    const __m256i aw = _mm256_sign_epi8(w, w);
    const float dw = _cvtsh_ss(b[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& xb = x[t * xs + i];
      const __m256i sx = _mm256_sign_epi8(load256(xb.qs), w);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(aw, sx)), _mm256_set1_ps(dw * xb.d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = hsum_ps(acc[t]);
}

// The 32 bits of a 5-bit block's qh as bytes of 0 or 16 (bit 4 of the codes): byte j <- bit j.
inline __m256i high_bits_32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j takes byte j / 8 of the bits (the shuffle is per 128-bit lane; both lanes hold all four bytes).
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));  // byte j tests bit j % 8
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

// The 32-element blocks with 4- or 5-bit codes q (element j in byte j of the vector):
//   Q4_0: w = d * (q - 8); Q5_0: w = d * (q - 16); Q4_1, Q5_1: w = d * q + m.
// The unsigned codes are dotted as they are; the offset (or min) times sum(x) is added apart.
template <class Block>
struct Block32Codes {
  static constexpr bool kFiveBit = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  static constexpr bool kMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  static constexpr float kOffset = std::is_same_v<Block, BlockQ4_0> ? 8.0f : std::is_same_v<Block, BlockQ5_0> ? 16.0f : 0.0f;
  static __m256i codes(const Block& b) {
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    if constexpr (kFiveBit) return _mm256_or_si256(w, high_bits_32(b.qh));
    else return w;
  }
  // The per-block term that multiplies d_x * sum(x_q): -offset * d, or m.
  static float sum_weight(const Block& b) {
    if constexpr (kMin) return _cvtsh_ss(b.m);
    else return -kOffset * _cvtsh_ss(b.d);
  }
};

template <class Block, int NT>
void block32_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  using Codes = Block32Codes<Block>;
  const auto* b = static_cast<const Block*>(row);
  __m256 acc[NT];
  float corr[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK; ++i) {
    const __m256i w = Codes::codes(b[i]);
    const float dw = _cvtsh_ss(b[i].d), sw = Codes::sum_weight(b[i]);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& xb = x[t * xs + i];
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(w, load256(xb.qs))), _mm256_set1_ps(dw * xb.d), acc[t]);
      corr[t] += sw * xb.d * static_cast<float>(xb.sum16[0] + xb.sum16[1]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = hsum_ps(acc[t]) + corr[t];
}
template <int NT> void q4_0_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { block32_q8a<BlockQ4_0, NT>(r, x, xs, n, o, os); }
template <int NT> void q4_1_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { block32_q8a<BlockQ4_1, NT>(r, x, xs, n, o, os); }
template <int NT> void q5_0_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { block32_q8a<BlockQ5_0, NT>(r, x, xs, n, o, os); }
template <int NT> void q5_1_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { block32_q8a<BlockQ5_1, NT>(r, x, xs, n, o, os); }

// Q4_K and Q5_K: per 32-element sub-block j, w = d * sc_j * q - dmin * m_j with q in 0..15 (Q5_K: 0..31, bit 4
// of sub-block j's element l in bit j of qh[l]).
template <class Block, int NT>
void k_quant_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  constexpr bool kFiveBit = std::is_same_v<Block, BlockQ5_K>;
  const auto* b = static_cast<const Block*>(row);
  const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
  __m256 acc[NT];
  float corr[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFiveBit) qh = load256(b[i].qh);
    for (int pair = 0; pair < 4; ++pair) {
      uint8_t sc1, m1, sc2, m2;
      q4_k_scale_min(2 * pair, b[i].scales, sc1, m1);
      q4_k_scale_min(2 * pair + 1, b[i].scales, sc2, m2);
      const __m256i q = load256(b[i].qs + 32 * pair);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kFiveBit) {  // bits 2 pair and 2 pair + 1 of each qh byte, moved to bit 4
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const size_t blk = i * 8 + 2 * pair;
      for (int t = 0; t < NT; ++t) {
        const BlockQ8A& x0 = x[t * xs + blk];
        const BlockQ8A& x1 = x[t * xs + blk + 1];
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(lo, load256(x0.qs))), _mm256_set1_ps(d * sc1 * x0.d), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(hi, load256(x1.qs))), _mm256_set1_ps(d * sc2 * x1.d), acc[t]);
        corr[t] += dmin * (m1 * x0.d * static_cast<float>((x0.sum16[0] + x0.sum16[1])) + m2 * x1.d * static_cast<float>((x1.sum16[0] + x1.sum16[1])));
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = hsum_ps(acc[t]) - corr[t];
}
template <int NT> void q4_k_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { k_quant_q8a<BlockQ4_K, NT>(r, x, xs, n, o, os); }
template <int NT> void q5_k_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { k_quant_q8a<BlockQ5_K, NT>(r, x, xs, n, o, os); }

// Q2_K and Q3_K: per 16-element sub-block j, Q2_K's w = d * (sc_j & 15) * q - dmin * (sc_j >> 4) with q in 0..3,
// Q3_K's w = d * (sc_j - 32) * (q - 4) with q in 0..7 (bit 2 from hmask). Element 128 h + 32 k + l has its low
// 2 bits at bits 2 k of qs[32 h + l], so each (h, k) is one 32-element activation block; lanes 0..3 of its
// int32 products hold the first 16 elements, lanes 4..7 the second.
template <class Block, int NT>
void low_bit_k_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>;
  const auto* b = static_cast<const Block*>(row);
  const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  __m256 acc[NT];
  float corr[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d);
    float scale[16], offset[16];  // per sub-block: the codes' factor, and what multiplies sum(x)
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) {
      for (int j = 0; j < 16; ++j) scale[j] = d * static_cast<float>(q3_k_scale(j, b[i].scales) - 32), offset[j] = 4.0f * scale[j];
      hm = load256(b[i].hmask);
    } else {
      const float dmin = _cvtsh_ss(b[i].dmin);
      for (int j = 0; j < 16; ++j) scale[j] = d * (b[i].scales[j] & 0xF), offset[j] = dmin * (b[i].scales[j] >> 4);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(b[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), m2);
        if constexpr (kQ3) {  // bit 4 h + k of each hmask byte, moved to bit 2
          codes = _mm256_or_si256(codes, _mm256_slli_epi16(_mm256_and_si256(hm, one), 2));
          hm = _mm256_srli_epi16(hm, 1);
        }
        const int sb = 8 * h + 2 * k;  // the first of the block's two sub-blocks
        const size_t blk = i * 8 + 4 * h + k;
        for (int t = 0; t < NT; ++t) {
          const BlockQ8A& xb = x[t * xs + blk];
          const __m256 sc = _mm256_setr_m128(_mm_set1_ps(scale[sb] * xb.d), _mm_set1_ps(scale[sb + 1] * xb.d));
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(codes, load256(xb.qs))), sc, acc[t]);
          corr[t] += xb.d * (offset[sb] * xb.sum16[0] + offset[sb + 1] * xb.sum16[1]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = hsum_ps(acc[t]) - corr[t];
}
template <int NT> void q2_k_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { low_bit_k_q8a<BlockQ2_K, NT>(r, x, xs, n, o, os); }
template <int NT> void q3_k_q8a(const void* r, const BlockQ8A* x, size_t xs, size_t n, float* o, size_t os) { low_bit_k_q8a<BlockQ3_K, NT>(r, x, xs, n, o, os); }

// Q6_K: per 16-element sub-block, w = d * sc * (q - 32) with q in 0..63. Each 32-element activation block
// spans two sub-blocks: lanes 0..3 of the int32 products hold the first 16, lanes 4..7 the second.
template <int NT>
void q6_k_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ6_K*>(row);
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
  __m256 acc[NT];
  float corr[NT] = {};
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = _cvtsh_ss(b[i].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      const __m256i ql0 = load256(ql), ql1 = load256(ql + 32), qh = load256(b[i].qh + 32 * half);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)),
      };
      const size_t blk = i * 8 + 4 * half;
      for (int k = 0; k < 4; ++k) {
        const float s0 = d * sc[2 * k], s1 = d * sc[2 * k + 1];
        for (int t = 0; t < NT; ++t) {
          const BlockQ8A& xb = x[t * xs + blk + k];
          const __m256 scale = _mm256_setr_m128(_mm_set1_ps(s0 * xb.d), _mm_set1_ps(s1 * xb.d));
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(q[k], load256(xb.qs))), scale, acc[t]);
          corr[t] += 32.0f * xb.d * (s0 * xb.sum16[0] + s1 * xb.sum16[1]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = hsum_ps(acc[t]) - corr[t];
}

DotQ8Fn dot_q8_table(DType type) {
  switch (type) {
    case DType::Q8_0: return KESTREL_DOT_Q8_DISPATCH(q8_0_q8a);
    case DType::Q4_0: return KESTREL_DOT_Q8_DISPATCH(q4_0_q8a);
    case DType::Q4_1: return KESTREL_DOT_Q8_DISPATCH(q4_1_q8a);
    case DType::Q5_0: return KESTREL_DOT_Q8_DISPATCH(q5_0_q8a);
    case DType::Q5_1: return KESTREL_DOT_Q8_DISPATCH(q5_1_q8a);
    case DType::Q2_K: return KESTREL_DOT_Q8_DISPATCH(q2_k_q8a);
    case DType::Q3_K: return KESTREL_DOT_Q8_DISPATCH(q3_k_q8a);
    case DType::Q4_K: return KESTREL_DOT_Q8_DISPATCH(q4_k_q8a);
    case DType::Q5_K: return KESTREL_DOT_Q8_DISPATCH(q5_k_q8a);
    case DType::Q6_K: return KESTREL_DOT_Q8_DISPATCH(q6_k_q8a);
    default: return nullptr;
  }
}

}  // namespace
}  // namespace kestrel
