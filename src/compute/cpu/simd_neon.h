// Vec128: 4 float lanes of AArch64 Advanced SIMD, the vector interface the single-source kernels
// (`*_impl.h`) are written against. Include only from the `*_neon.cpp` files; internal linkage.
#pragma once
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

namespace kestrel {
namespace {

struct Vec128 {
  using type = float32x4_t;
  using itype = int32x4_t;
  static constexpr int W = 4;
  static type zero() { return vdupq_n_f32(0.0f); }
  static type set1(float x) { return vdupq_n_f32(x); }
  static type load(const float* p) { return vld1q_f32(p); }
  static type load(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static type load_bf16(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static void store(float* p, type v) { vst1q_f32(p, v); }
  static type add(type a, type b) { return vaddq_f32(a, b); }
  static type sub(type a, type b) { return vsubq_f32(a, b); }
  static type mul(type a, type b) { return vmulq_f32(a, b); }
  static type div(type a, type b) { return vdivq_f32(a, b); }
  static type fma(type a, type b, type c) { return vfmaq_f32(c, a, b); }
  static type max(type a, type b) { return vmaxq_f32(a, b); }
  static type abs(type a) { return vabsq_f32(a); }
  // a where x >= 0, b where x < 0.
  static type select_negative(type x, type a, type b) { return vbslq_f32(vcltzq_f32(x), b, a); }
  static float reduce_max(type v) { return vmaxvq_f32(v); }
  static float reduce_add(type v) { return vaddvq_f32(v); }
  // exp(x) for x <= 0 within ~2e-7 relative: 2^(x log2 e) as an integer power of two times a degree-6
  // polynomial on [-0.5, 0.5].
  static type exp(type x) {
    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    const type t = vmulq_f32(x, vdupq_n_f32(1.44269504f));
    const type n = vrndnq_f32(t);
    const type f = vmulq_f32(vsubq_f32(t, n), vdupq_n_f32(0.693147181f));
    type p = vdupq_n_f32(1.0f / 720.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, f);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    const int32x4_t pow2 = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(pow2));
  }
  // Round to nearest, ties to even, as nearbyint.
  static itype round_to_int(type v) { return vcvtnq_s32_f32(v); }
  static int32_t reduce_add(itype v) { return vaddvq_s32(v); }
  // The lanes as int8 (each within -128..127).
  static void store_int8(int8_t* p, itype v) {
    const int16x4_t w16 = vqmovn_s32(v);
    const int8x8_t w8 = vqmovn_s16(vcombine_s16(w16, w16));
    vst1_lane_s32(reinterpret_cast<int32_t*>(p), vreinterpret_s32_s8(w8), 0);
  }
  // part[k] += x[i]^2 in double over i = k mod 8, in order (n a multiple of 8).
  static void sum_squares8(const float* x, size_t n, double* part) {
    float64x2_t acc[4];
    for (int k = 0; k < 4; ++k) acc[k] = vld1q_f64(part + 2 * k);
    for (size_t i = 0; i < n; i += 8) {
      const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
      const float64x2_t v[4] = {vcvt_f64_f32(vget_low_f32(a)), vcvt_high_f64_f32(a), vcvt_f64_f32(vget_low_f32(b)),
                                vcvt_high_f64_f32(b)};
      for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f64(acc[k], v[k], v[k]);
    }
    for (int k = 0; k < 4; ++k) vst1q_f64(part + 2 * k, acc[k]);
  }
};

}  // namespace
}  // namespace kestrel
