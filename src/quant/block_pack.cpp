#include "quant/block_pack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/block_grid.h"

namespace kestrel {

void pack_q8_0(const float* x, float d, BlockQ8_0& b) {
  const float id = d ? 1.f / d : 0.f;
  b.d = fp32_to_fp16(d);
  for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(std::clamp<long>(std::lround(x[j] * id), -127, 127));
}

void pack_q4_0(const float* x, float d, BlockQ4_0& b) {
  const float id = d ? 1.f / d : 0.f;
  b.d = fp32_to_fp16(d);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::floor(x[j] * id + 8.5f)), 0, 15));
  set_block_codes(DType::Q4_0, &b, q);
}

namespace {

// Codes of x[n] under fixed step and offset: round((x - offset) / step) clamped to [0, levels - 1].
void affine_codes(const float* x, int n, float step, float offset, int levels, uint8_t* q) {
  for (int j = 0; j < n; ++j)
    q[j] = static_cast<uint8_t>(std::clamp<long>(step ? std::lround((x[j] - offset) / step) : 0, 0, levels - 1));
}

// A K-quant super-block's scales and mins (Q4_K, Q5_K: the same leading bytes) stored as 6-bit multiples of
// d = max scale / 63 and dmin = max min / 63; then the codes of x[256] in [0, levels - 1] under the stored
// values, into q[256].
void pack_k_scales_and_codes(const float* xb, const float* scales, const float* mins, int levels, uint16_t& d,
                             uint16_t& dmin, uint8_t* packed_scales, uint8_t* q) {
  const float max_scale = *std::max_element(scales, scales + 8), max_min = *std::max_element(mins, mins + 8);
  d = fp32_to_fp16(max_scale / 63.f);
  dmin = fp32_to_fp16(max_min / 63.f);
  const float d_used = fp16_to_fp32(d), dmin_used = fp16_to_fp32(dmin);
  uint8_t sc6[8], m6[8];
  for (int j = 0; j < 8; ++j) {
    sc6[j] = static_cast<uint8_t>(std::clamp<long>(d_used ? std::lround(scales[j] / d_used) : 0, 0, 63));
    m6[j] = static_cast<uint8_t>(std::clamp<long>(dmin_used ? std::lround(mins[j] / dmin_used) : 0, 0, 63));
  }
  std::memset(packed_scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      packed_scales[j] = sc6[j];
      packed_scales[j + 4] = m6[j];
    } else {
      packed_scales[j + 4] = static_cast<uint8_t>((sc6[j] & 0xF) | ((m6[j] & 0xF) << 4));
      packed_scales[j - 4] |= static_cast<uint8_t>((sc6[j] >> 4) << 6);
      packed_scales[j] |= static_cast<uint8_t>((m6[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const float ds = d_used * sc6[j], dm = dmin_used * m6[j];
    affine_codes(xb + j * 32, 32, ds, -dm, levels, q + j * 32);
  }
}

}  // namespace

void pack_q4_1(const float* x, float d, float m, BlockQ4_1& b) {
  b.d = fp32_to_fp16(d);
  b.m = fp32_to_fp16(m);
  uint8_t q[kQK];
  affine_codes(x, kQK, fp16_to_fp32(b.d), fp16_to_fp32(b.m), 16, q);
  set_block_codes(DType::Q4_1, &b, q);
}

void pack_q5_0(const float* x, float d, BlockQ5_0& b) {
  const float id = d ? 1.f / d : 0.f;
  b.d = fp32_to_fp16(d);
  uint8_t q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::floor(x[j] * id + 16.5f)), 0, 31));
  set_block_codes(DType::Q5_0, &b, q);
}

void pack_q5_1(const float* x, float d, float m, BlockQ5_1& b) {
  b.d = fp32_to_fp16(d);
  b.m = fp32_to_fp16(m);
  uint8_t q[kQK];
  affine_codes(x, kQK, fp16_to_fp32(b.d), fp16_to_fp32(b.m), 32, q);
  set_block_codes(DType::Q5_1, &b, q);
}

void pack_q4_k(const float* xb, const float* scales, const float* mins, BlockQ4_K& b) {
  uint8_t q[kQK_K];
  pack_k_scales_and_codes(xb, scales, mins, 16, b.d, b.dmin, b.scales, q);
  set_block_codes(DType::Q4_K, &b, q);
}

void pack_q5_k(const float* xb, const float* scales, const float* mins, BlockQ5_K& b) {
  uint8_t q[kQK_K];
  pack_k_scales_and_codes(xb, scales, mins, 32, b.d, b.dmin, b.scales, q);
  set_block_codes(DType::Q5_K, &b, q);
}

void pack_q2_k(const float* xb, const float* scales, const float* mins, BlockQ2_K& b) {
  const float max_scale = *std::max_element(scales, scales + 16), max_min = *std::max_element(mins, mins + 16);
  b.d = fp32_to_fp16(max_scale / 15.f);
  b.dmin = fp32_to_fp16(max_min / 15.f);
  const float d_used = fp16_to_fp32(b.d), dmin_used = fp16_to_fp32(b.dmin);
  uint8_t q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    const auto sc = static_cast<uint8_t>(std::clamp<long>(d_used ? std::lround(scales[j] / d_used) : 0, 0, 15));
    const auto m = static_cast<uint8_t>(std::clamp<long>(dmin_used ? std::lround(mins[j] / dmin_used) : 0, 0, 15));
    b.scales[j] = static_cast<uint8_t>(sc | (m << 4));
    affine_codes(xb + j * 16, 16, d_used * sc, -dmin_used * m, 4, q + j * 16);
  }
  set_block_codes(DType::Q2_K, &b, q);
}

void pack_q3_k(const float* xb, const float* scales, BlockQ3_K& b) {
  float max_abs_scale = 0, max_scale = 0;
  for (int j = 0; j < 16; ++j)
    if (std::fabs(scales[j]) > max_abs_scale) { max_abs_scale = std::fabs(scales[j]); max_scale = scales[j]; }
  b.d = fp32_to_fp16(max_scale / -32.f);
  const float d_used = fp16_to_fp32(b.d);
  const float id = d_used ? 1.f / d_used : 0.f;
  std::memset(b.scales, 0, 12);
  uint8_t q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    const int sc = static_cast<int>(std::clamp<long>(std::lround(id * scales[j]), -32, 31));
    const int stored = sc + 32;  // 6 bits
    b.scales[j % 8] |= static_cast<uint8_t>((stored & 0xF) << (j < 8 ? 0 : 4));
    b.scales[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
    const float ds = d_used * static_cast<float>(sc);
    for (int l = 0; l < 16; ++l) {
      const long v = ds ? std::lround(xb[j * 16 + l] / ds) : 0;
      q[j * 16 + l] = static_cast<uint8_t>(std::clamp<long>(v, -4, 3) + 4);
    }
  }
  set_block_codes(DType::Q3_K, &b, q);
}

void pack_q6_k(const float* xb, const float* scales, BlockQ6_K& b) {
  float max_abs_scale = 0, max_scale = 0;
  for (int j = 0; j < 16; ++j)
    if (std::fabs(scales[j]) > max_abs_scale) { max_abs_scale = std::fabs(scales[j]); max_scale = scales[j]; }
  b.d = fp32_to_fp16(max_scale / -128.f);
  const float d_used = fp16_to_fp32(b.d);
  const float id = d_used ? 1.f / d_used : 0.f;
  uint8_t q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    b.scales[j] = static_cast<int8_t>(std::clamp<long>(std::lround(id * scales[j]), -128, 127));
    const float ds = d_used * b.scales[j];
    for (int l = 0; l < 16; ++l) {
      const long v = ds ? std::lround(xb[j * 16 + l] / ds) : 0;
      q[j * 16 + l] = static_cast<uint8_t>(std::clamp<long>(v, -32, 31) + 32);
    }
  }
  set_block_codes(DType::Q6_K, &b, q);
}

}  // namespace kestrel
