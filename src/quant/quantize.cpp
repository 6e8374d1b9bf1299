#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/block_grid.h"
#include "quant/block_pack.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/sparse24.h"

namespace kestrel {
namespace {

void dequant_q8_0(const BlockQ8_0* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * b[i].qs[j];
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = d * ((b[i].qs[j] & 0xF) - 8);
      y[i * kQK + j + 16] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

// Q4_1 and Q5_1: y = d * q + m.
template <typename Block>
void dequant_min_32(DType type, const Block* b, float* y, size_t nb) {
  uint8_t q[kQK];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    block_codes(type, &b[i], q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * q[j] + m;
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, size_t nb) {
  uint8_t q[kQK];
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    block_codes(DType::Q5_0, &b[i], q);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * (q[j] - 16);
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    float* out = y + i * kQK_K;
    for (int j = 0; j < 8; ++j) {  // sub-block j: low nibbles of qs[32 (j / 2) ..] (even j) or high (odd), bit j of qh
      uint8_t sc, m;
      q4_k_scale_min(j, b[i].scales, sc, m);
      const float dj = d * sc, mj = dmin * m;
      const uint8_t* q = b[i].qs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        const int low = j % 2 == 0 ? (q[l] & 0xF) : (q[l] >> 4);
        out[j * 32 + l] = dj * (low | (((b[i].qh[l] >> j) & 1) << 4)) - mj;
      }
    }
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    float* out = y + i * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {  // e = 128 h + 32 k + l: bits 2 k of qs[32 h + l]; sub-block e / 16
      const int q = (b[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sc = b[i].scales[e / 16];
      out[e] = d * (sc & 0xF) * q - dmin * (sc >> 4);
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    float* out = y + i * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {  // low 2 bits as Q2_K's; bit 2 in bit e / 32 of hmask[e % 32]
      const int low = (b[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int high = (b[i].hmask[e % 32] >> (e / 32)) & 1;
      out[e] = d * static_cast<float>(q3_k_scale(e / 16, b[i].scales) - 32) * static_cast<float>((low | (high << 2)) - 4);
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    float* out = y + i * kQK_K;
    for (int pair = 0; pair < 4; ++pair) {  // 64 elements: sub-blocks 2*pair (low nibbles), 2*pair+1 (high)
      uint8_t sc, m;
      q4_k_scale_min(2 * pair, b[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(2 * pair + 1, b[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) out[l] = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) out[32 + l] = d2 * (q[l] >> 4) - m2;
      out += 64;
      q += 32;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    float* out = y + i * kQK_K;
    for (int half = 0; half < 2; ++half) {  // 128 elements each
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * sc[is + 0] * q1;
        out[l + 32] = d * sc[is + 2] * q2;
        out[l + 64] = d * sc[is + 4] * q3;
        out[l + 96] = d * sc[is + 6] * q4;
      }
      out += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void quant_q8_0(const float* x, BlockQ8_0* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[i * kQK + j]));
    pack_q8_0(x + i * kQK, amax / 127.f, b[i]);
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    float max = 0, amax = 0;  // the value of largest magnitude, with its sign, maps to q = 0
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(xb[j]) > amax) { amax = std::fabs(xb[j]); max = xb[j]; }
    pack_q4_0(xb, max / -8.f, b[i]);
  }
}

void quant_q5_0(const float* x, BlockQ5_0* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    float max = 0, amax = 0;  // as Q4_0: the value of largest magnitude maps to q = 0
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(xb[j]) > amax) { amax = std::fabs(xb[j]); max = xb[j]; }
    pack_q5_0(xb, max / -16.f, b[i]);
  }
}

// Q4_1 / Q5_1: x ~ d * q + m over the block's range, q in [0, levels - 1].
template <typename Block, typename Pack>
void quant_min_max_32(const float* x, Block* b, size_t nb, int levels, const Pack& pack) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    const auto [lo, hi] = std::minmax_element(xb, xb + kQK);
    pack(xb, (*hi - *lo) / static_cast<float>(levels - 1), *lo, b[i]);
  }
}

// Q4_K / Q5_K: per sub-block, w ~ scale * q - min with min >= 0 over [min(x, 0), max(x)].
template <typename Block, typename Pack>
void quant_k_min_max(const float* x, Block* b, size_t nb, int levels, const Pack& pack) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[8], mins[8];
    for (int j = 0; j < 8; ++j) {
      float lo = xb[j * 32], hi = xb[j * 32];
      for (int l = 0; l < 32; ++l) { lo = std::min(lo, xb[j * 32 + l]); hi = std::max(hi, xb[j * 32 + l]); }
      lo = std::min(lo, 0.f);
      scales[j] = (hi - lo) / static_cast<float>(levels - 1);
      mins[j] = -lo;
    }
    pack(xb, scales, mins, b[i]);
  }
}

void quant_q2_k(const float* x, BlockQ2_K* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16], mins[16];  // per sub-block of 16: w ~ scale * q - min over [min(x, 0), max(x)]
    for (int j = 0; j < 16; ++j) {
      float lo = 0, hi = xb[j * 16];
      for (int l = 0; l < 16; ++l) { lo = std::min(lo, xb[j * 16 + l]); hi = std::max(hi, xb[j * 16 + l]); }
      scales[j] = (hi - lo) / 3.f;
      mins[j] = -lo;
    }
    pack_q2_k(xb, scales, mins, b[i]);
  }
}

void quant_q3_k(const float* x, BlockQ3_K* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16];  // the value of largest magnitude maps to q = -4
    for (int j = 0; j < 16; ++j) {
      float amax = 0, max = 0;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(xb[j * 16 + l]) > amax) { amax = std::fabs(xb[j * 16 + l]); max = xb[j * 16 + l]; }
      scales[j] = max / -4.f;
    }
    pack_q3_k(xb, scales, b[i]);
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0, max = 0;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(xb[j * 16 + l]) > amax) { amax = std::fabs(xb[j * 16 + l]); max = xb[j * 16 + l]; }
      scales[j] = max / -32.f;
    }
    pack_q6_k(xb, scales, b[i]);
  }
}

}  // namespace

void dequantize_row(DType type, const void* row, float* out, size_t n) {
  switch (type) {
    case DType::F32: std::memcpy(out, row, n * sizeof(float)); break;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
      break;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(h[i]);
      break;
    }
    case DType::Q8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(row), out, n / kQK); break;
    case DType::Q4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(row), out, n / kQK); break;
    case DType::Q4_1: dequant_min_32(type, static_cast<const BlockQ4_1*>(row), out, n / kQK); break;
    case DType::Q5_0: dequant_q5_0(static_cast<const BlockQ5_0*>(row), out, n / kQK); break;
    case DType::Q5_1: dequant_min_32(type, static_cast<const BlockQ5_1*>(row), out, n / kQK); break;
    case DType::Q2_K: dequant_q2_k(static_cast<const BlockQ2_K*>(row), out, n / kQK_K); break;
    case DType::Q3_K: dequant_q3_k(static_cast<const BlockQ3_K*>(row), out, n / kQK_K); break;
    case DType::Q4_K: dequant_q4_k(static_cast<const BlockQ4_K*>(row), out, n / kQK_K); break;
    case DType::Q5_K: dequant_q5_k(static_cast<const BlockQ5_K*>(row), out, n / kQK_K); break;
    case DType::Q6_K: dequant_q6_k(static_cast<const BlockQ6_K*>(row), out, n / kQK_K); break;
    case DType::FP8_E4M3: {
      const auto* b = static_cast<const BlockFP8*>(row);
      for (size_t i = 0; i < n / kQK; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQK; ++j) out[i * kQK + j] = d * fp8_e4m3_to_float(b[i].qs[j]);
      }
      break;
    }
    case DType::S24_F16:
    case DType::S24_Q8:
    case DType::S24_Q4: dequantize_sparse24_row(type, row, out, n); break;
    case DType::I8: {
      const auto* q = static_cast<const int8_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = q[i];
      break;
    }
    case DType::I32: {
      const auto* q = static_cast<const int32_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]);
      break;
    }
  }
}

void quantize_row(DType type, const float* in, void* row, size_t n) {
  switch (type) {
    case DType::F32: std::memcpy(row, in, n * sizeof(float)); break;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(in[i]);
      break;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(in[i]);
      break;
    }
    case DType::Q8_0: quant_q8_0(in, static_cast<BlockQ8_0*>(row), n / kQK); break;
    case DType::Q4_0: quant_q4_0(in, static_cast<BlockQ4_0*>(row), n / kQK); break;
    case DType::Q4_1: quant_min_max_32(in, static_cast<BlockQ4_1*>(row), n / kQK, 16, pack_q4_1); break;
    case DType::Q5_0: quant_q5_0(in, static_cast<BlockQ5_0*>(row), n / kQK); break;
    case DType::Q5_1: quant_min_max_32(in, static_cast<BlockQ5_1*>(row), n / kQK, 32, pack_q5_1); break;
    case DType::Q2_K: quant_q2_k(in, static_cast<BlockQ2_K*>(row), n / kQK_K); break;
    case DType::Q3_K: quant_q3_k(in, static_cast<BlockQ3_K*>(row), n / kQK_K); break;
    case DType::Q4_K: quant_k_min_max(in, static_cast<BlockQ4_K*>(row), n / kQK_K, 16, pack_q4_k); break;
    case DType::Q5_K: quant_k_min_max(in, static_cast<BlockQ5_K*>(row), n / kQK_K, 32, pack_q5_k); break;
    case DType::Q6_K: quant_q6_k(in, static_cast<BlockQ6_K*>(row), n / kQK_K); break;
    case DType::FP8_E4M3: {
      auto* b = static_cast<BlockFP8*>(row);
      for (size_t i = 0; i < n / kQK; ++i) {
        float amax = 0;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(in[i * kQK + j]));
        b[i].d = fp32_to_fp16(amax / kFp8E4M3Max);
        const float d = fp16_to_fp32(b[i].d), inverse = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < kQK; ++j) b[i].qs[j] = float_to_fp8_e4m3(in[i * kQK + j] * inverse);
      }
      break;
    }
    case DType::S24_F16:
    case DType::S24_Q8:
    case DType::S24_Q4: quantize_sparse24_row(type, in, row, n); break;
    case DType::I8: {
      auto* q = static_cast<int8_t*>(row);
      for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(in[i]), -127.0f, 127.0f));
      break;
    }
    case DType::I32: {
      auto* q = static_cast<int32_t*>(row);
      for (size_t i = 0; i < n; ++i) q[i] = static_cast<int32_t>(std::nearbyint(in[i]));
      break;
    }
  }
}

}  // namespace kestrel
