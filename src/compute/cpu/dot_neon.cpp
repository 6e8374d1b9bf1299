// AArch64 NEON row-dot kernels: float rows (dot_float_impl.h), and the integer path (Q8_0, Q4_0, Q4_K,
// Q6_K rows against 8-bit activation blocks of up to 8 tokens) with the dot-product instruction (sdot: 4 signed byte products into each int32 lane). Weights are made signed
// first (q - 8, q - 32, or the 4-bit q as it is), so no offset terms are needed except Q4_K's mins.
// Compiled with +dotprod and entered only after run-time detection; internal linkage throughout.
#include <arm_neon.h>

#include <cstdint>

#include "compute/cpu/dot.h"
#include "compute/cpu/dot_float_impl.h"
#include "compute/cpu/dot_q8_dispatch.h"
#include "compute/cpu/simd_neon.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

inline float half_to_float(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

// int32 sum of 32 signed byte products: w[0..15] . x[0..15] + w[16..31] . x[16..31].
inline int32_t dot32(int8x16_t w0, int8x16_t w1, const int8_t* x) {
  return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16)));
}
// The two 16-input halves' sums separately.
inline int32_t dot16(int8x16_t w, const int8_t* x) { return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(x))); }

template <int NT>
void q8_0_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  float acc[NT] = {};
  for (size_t i = 0; i < n / kQK; ++i) {
    const int8x16_t w0 = vld1q_s8(b[i].qs), w1 = vld1q_s8(b[i].qs + 16);
    const float dw = half_to_float(b[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& xb = x[t * xs + i];
      acc[t] += dw * xb.d * static_cast<float>(dot32(w0, w1, xb.qs));
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = acc[t];
}

// Q4_0: w = d * (q - 8), q in 0..15: low nibbles are inputs 0..15, high nibbles 16..31.
template <int NT>
void q4_0_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ4_0*>(row);
  const uint8x16_t m4 = vdupq_n_u8(0xF);
  const int8x16_t eight = vdupq_n_s8(8);
  float acc[NT] = {};
  for (size_t i = 0; i < n / kQK; ++i) {
    const uint8x16_t q = vld1q_u8(b[i].qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), eight);
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
    const float dw = half_to_float(b[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8A& xb = x[t * xs + i];
      acc[t] += dw * xb.d * static_cast<float>(dot32(lo, hi, xb.qs));
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = acc[t];
}

// Q4_K: per 32-input sub-block j, w = d * sc_j * q - dmin * m_j with q in 0..15 (already a signed byte).
template <int NT>
void q4_k_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ4_K*>(row);
  const uint8x16_t m4 = vdupq_n_u8(0xF);
  float acc[NT] = {};
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
    for (int pair = 0; pair < 4; ++pair) {
      uint8_t sc1, m1, sc2, m2;
      q4_k_scale_min(2 * pair, b[i].scales, sc1, m1);
      q4_k_scale_min(2 * pair + 1, b[i].scales, sc2, m2);
      const uint8x16_t q0 = vld1q_u8(b[i].qs + 32 * pair), q1 = vld1q_u8(b[i].qs + 32 * pair + 16);
      const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(q0, m4)), lo1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
      const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
      const size_t blk = i * 8 + 2 * pair;
      for (int t = 0; t < NT; ++t) {
        const BlockQ8A& x0 = x[t * xs + blk];
        const BlockQ8A& x1 = x[t * xs + blk + 1];
        acc[t] += d * (sc1 * x0.d * static_cast<float>(dot32(lo0, lo1, x0.qs)) + sc2 * x1.d * static_cast<float>(dot32(hi0, hi1, x1.qs)));
        acc[t] -= dmin * (m1 * x0.d * static_cast<float>(x0.sum()) + m2 * x1.d * static_cast<float>(x1.sum()));
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = acc[t];
}

// Q6_K: per 16-input sub-block, w = d * sc * (q - 32) with q in 0..63; each 32-input activation block
// spans two sub-blocks.
template <int NT>
void q6_k_q8a(const void* row, const BlockQ8A* x, size_t xs, size_t n, float* out, size_t os) {
  const auto* b = static_cast<const BlockQ6_K*>(row);
  const uint8x16_t m4 = vdupq_n_u8(0xF), m2 = vdupq_n_u8(3);
  const int8x16_t off = vdupq_n_s8(32);
  float acc[NT] = {};
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = half_to_float(b[i].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      for (int k = 0; k < 4; ++k) {  // quarter k: 32 inputs, one activation block
        int8x16_t q[2];
        for (int p = 0; p < 2; ++p) {  // inputs 16p .. 16p + 15 of the quarter
          const uint8x16_t low_bytes = vld1q_u8(ql + 16 * p + (k % 2 ? 32 : 0));
          const uint8x16_t low = k < 2 ? vandq_u8(low_bytes, m4) : vshrq_n_u8(low_bytes, 4);
          const uint8x16_t high = vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * p), vdupq_n_s8(static_cast<int8_t>(-2 * k))), m2);
          q[p] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(high, 4))), off);
        }
        const float s0 = d * sc[2 * k], s1 = d * sc[2 * k + 1];
        for (int t = 0; t < NT; ++t) {
          const BlockQ8A& xb = x[t * xs + i * 8 + 4 * half + k];
          acc[t] += xb.d * (s0 * static_cast<float>(dot16(q[0], xb.qs)) + s1 * static_cast<float>(dot16(q[1], xb.qs + 16)));
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t * os] = acc[t];
}

}  // namespace

DotQ8Fn dot_q8_kernel_neon(DType type) {
  switch (type) {
    case DType::Q8_0: return KESTREL_DOT_Q8_DISPATCH(q8_0_q8a);
    case DType::Q4_0: return KESTREL_DOT_Q8_DISPATCH(q4_0_q8a);
    case DType::Q4_K: return KESTREL_DOT_Q8_DISPATCH(q4_k_q8a);
    case DType::Q6_K: return KESTREL_DOT_Q8_DISPATCH(q6_k_q8a);
    default: return nullptr;
  }
}

DotFn dot_kernel_neon(DType type) { return dot_float_table<Vec128>(type); }

}  // namespace kestrel
