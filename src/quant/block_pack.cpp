#include "quant/block_pack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace kestrel {

void pack_q8_0(const float* x, float d, BlockQ8_0& b) {
  const float id = d ? 1.f / d : 0.f;
  b.d = fp32_to_fp16(d);
  for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(std::clamp<long>(std::lround(x[j] * id), -127, 127));
}

void pack_q4_0(const float* x, float d, BlockQ4_0& b) {
  const float id = d ? 1.f / d : 0.f;
  b.d = fp32_to_fp16(d);
  const auto code = [&](float v) { return std::clamp(static_cast<int>(std::floor(v * id + 8.5f)), 0, 15); };
  for (int j = 0; j < kQK / 2; ++j) b.qs[j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
}

void pack_q4_k(const float* xb, const float* scales, const float* mins, BlockQ4_K& b) {
  const float max_scale = *std::max_element(scales, scales + 8), max_min = *std::max_element(mins, mins + 8);
  b.d = fp32_to_fp16(max_scale / 63.f);
  b.dmin = fp32_to_fp16(max_min / 63.f);
  const float d_used = fp16_to_fp32(b.d), dmin_used = fp16_to_fp32(b.dmin);
  uint8_t sc6[8], m6[8];
  for (int j = 0; j < 8; ++j) {
    sc6[j] = static_cast<uint8_t>(std::clamp<long>(d_used ? std::lround(scales[j] / d_used) : 0, 0, 63));
    m6[j] = static_cast<uint8_t>(std::clamp<long>(dmin_used ? std::lround(mins[j] / dmin_used) : 0, 0, 63));
  }
  std::memset(b.scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      b.scales[j] = sc6[j];
      b.scales[j + 4] = m6[j];
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((sc6[j] & 0xF) | ((m6[j] & 0xF) << 4));
      b.scales[j - 4] |= static_cast<uint8_t>((sc6[j] >> 4) << 6);
      b.scales[j] |= static_cast<uint8_t>((m6[j] >> 4) << 6);
    }
  }
  uint8_t q[kQK_K];
  for (int j = 0; j < 8; ++j) {
    const float ds = d_used * sc6[j], dm = dmin_used * m6[j];
    for (int l = 0; l < 32; ++l) {
      const float v = ds ? (xb[j * 32 + l] + dm) / ds : 0.f;
      q[j * 32 + l] = static_cast<uint8_t>(std::clamp<long>(std::lround(v), 0, 15));
    }
  }
  for (int pair = 0; pair < 4; ++pair)
    for (int l = 0; l < 32; ++l)
      b.qs[pair * 32 + l] = static_cast<uint8_t>(q[pair * 64 + l] | (q[pair * 64 + 32 + l] << 4));
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
  for (int half = 0; half < 2; ++half) {
    uint8_t* ql = b.ql + half * 64;
    uint8_t* qh = b.qh + half * 32;
    const uint8_t* qq = q + half * 128;
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

}  // namespace kestrel
