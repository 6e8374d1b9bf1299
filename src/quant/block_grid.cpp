#include "quant/block_grid.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/fp16.h"

namespace kestrel {

namespace {

// The low 4 bits of codes[32]: element j in the low nibble of qs[j], element j + 16 in the high nibble.
void set_nibbles_32(uint8_t* qs, const uint8_t* q) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
// 5-bit codes[32]: nibbles as above, bit 4 of element j in bit j of the little-endian qh[4].
void set_5bit_32(uint8_t* qs, uint8_t* qh, const uint8_t* q) {
  set_nibbles_32(qs, q);
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}
// The low 4 bits of a K-quant's codes[256]: sub-blocks 2p and 2p + 1 share qs[32 p .. 32 p + 31], low nibbles first.
void set_nibbles_k(uint8_t* qs, const uint8_t* q) {
  for (int pair = 0; pair < 4; ++pair)
    for (int l = 0; l < 32; ++l)
      qs[pair * 32 + l] = static_cast<uint8_t>((q[pair * 64 + l] & 0xF) | ((q[pair * 64 + 32 + l] & 0xF) << 4));
}

// The low 2 bits of a Q2_K / Q3_K block's codes[256]: element 128 h + 32 k + l in bits 2 k of qs[32 h + l].
void set_crumbs_k(uint8_t* qs, const uint8_t* q) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      uint8_t byte = 0;
      for (int k = 0; k < 4; ++k) byte |= static_cast<uint8_t>((q[128 * h + 32 * k + l] & 3) << (2 * k));
      qs[32 * h + l] = byte;
    }
}
void crumbs_k(const uint8_t* qs, uint8_t* q) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) q[128 * h + 32 * k + l] = (qs[32 * h + l] >> (2 * k)) & 3;
}
// Bit 2 of a Q3_K block's codes: element 128 h + 32 k + l in bit 4 h + k of hmask[l].
void set_q3_k_high(uint8_t* hmask, const uint8_t* q) {
  for (int l = 0; l < 32; ++l) {
    uint8_t bits = 0;
    for (int hk = 0; hk < 8; ++hk) bits |= static_cast<uint8_t>(((q[32 * hk + l] >> 2) & 1) << hk);
    hmask[l] = bits;
  }
}

void nibbles_32(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < kQK / 2; ++j) q[j] = qs[j] & 0xF, q[j + 16] = qs[j] >> 4;
}
void five_bit_32(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  nibbles_32(qs, q);
  const uint32_t bits = qh[0] | (qh[1] << 8) | (qh[2] << 16) | (static_cast<uint32_t>(qh[3]) << 24);
  for (int j = 0; j < kQK; ++j) q[j] |= static_cast<uint8_t>(((bits >> j) & 1) << 4);
}
void nibbles_k(const uint8_t* qs, uint8_t* q) {
  for (int pair = 0; pair < 4; ++pair)
    for (int l = 0; l < 32; ++l) q[pair * 64 + l] = qs[pair * 32 + l] & 0xF, q[pair * 64 + 32 + l] = qs[pair * 32 + l] >> 4;
}

}  // namespace

uint8_t grid_code(float step, float offset, int levels, float x) {
  if (step == 0.0f) return 0;
  const float q = std::nearbyint((x - offset) / step);
  return static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(levels - 1)));
}

bool has_block_grid(DType type) {
  switch (type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

int grid_levels(DType type) {
  switch (type) {
    case DType::Q8_0: return 255;  // -127 .. 127, as the encoder writes
    case DType::Q6_K: return 64;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K: return 32;
    case DType::Q2_K: return 4;
    case DType::Q3_K: return 8;
    default: return 16;
  }
}

BlockGrid block_grid(DType type, const void* block) {
  BlockGrid g;
  g.levels = grid_levels(type);
  // Sub-blocks of `len` elements sharing step and offset.
  const auto fill = [&g](int first, int len, float step, float offset) {
    std::fill_n(g.step + first, len, step);
    std::fill_n(g.offset + first, len, offset);
  };
  switch (type) {
    case DType::Q8_0: {
      const float d = fp16_to_fp32(static_cast<const BlockQ8_0*>(block)->d);
      g.n = kQK;
      fill(0, kQK, d, -127.0f * d);
      break;
    }
    case DType::Q4_0: {
      const float d = fp16_to_fp32(static_cast<const BlockQ4_0*>(block)->d);
      g.n = kQK;
      fill(0, kQK, d, -8.0f * d);
      break;
    }
    case DType::Q4_1:
    case DType::Q5_1: {
      // Q4_1 and Q5_1 both lead with fp16 d, then fp16 m.
      const auto* h = static_cast<const uint16_t*>(block);
      g.n = kQK;
      fill(0, kQK, fp16_to_fp32(h[0]), fp16_to_fp32(h[1]));
      break;
    }
    case DType::Q5_0: {
      const float d = fp16_to_fp32(static_cast<const BlockQ5_0*>(block)->d);
      g.n = kQK;
      fill(0, kQK, d, -16.0f * d);
      break;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // Both lead with fp16 d, fp16 dmin and the 12 bytes of 6-bit sub-block scales and mins.
      const auto* b = static_cast<const BlockQ4_K*>(block);
      const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
      g.n = kQK_K;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        q4_k_scale_min(j, b->scales, sc, m);
        fill(j * 32, 32, d * sc, -dmin * m);
      }
      break;
    }
    case DType::Q2_K: {
      const auto* b = static_cast<const BlockQ2_K*>(block);
      const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
      g.n = kQK_K;
      for (int j = 0; j < 16; ++j) fill(j * 16, 16, d * (b->scales[j] & 0xF), -dmin * (b->scales[j] >> 4));
      break;
    }
    case DType::Q3_K: {
      const auto* b = static_cast<const BlockQ3_K*>(block);
      const float d = fp16_to_fp32(b->d);
      g.n = kQK_K;
      for (int j = 0; j < 16; ++j) {
        const float step = d * static_cast<float>(q3_k_scale(j, b->scales) - 32);
        fill(j * 16, 16, step, -4.0f * step);
      }
      break;
    }
    case DType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(block);
      const float d = fp16_to_fp32(b->d);
      g.n = kQK_K;
      for (int j = 0; j < 16; ++j) fill(j * 16, 16, d * b->scales[j], -32.0f * d * b->scales[j]);
      break;
    }
    default: std::abort();  // has_block_grid(type) is the caller's contract
  }
  return g;
}

void set_block_codes(DType type, void* block, const uint8_t* q) {
  switch (type) {
    case DType::Q8_0: {
      auto* b = static_cast<BlockQ8_0*>(block);
      for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(static_cast<int>(q[j]) - 127);
      break;
    }
    case DType::Q4_0: set_nibbles_32(static_cast<BlockQ4_0*>(block)->qs, q); break;
    case DType::Q4_1: set_nibbles_32(static_cast<BlockQ4_1*>(block)->qs, q); break;
    case DType::Q5_0: set_5bit_32(static_cast<BlockQ5_0*>(block)->qs, static_cast<BlockQ5_0*>(block)->qh, q); break;
    case DType::Q5_1: set_5bit_32(static_cast<BlockQ5_1*>(block)->qs, static_cast<BlockQ5_1*>(block)->qh, q); break;
    case DType::Q2_K: set_crumbs_k(static_cast<BlockQ2_K*>(block)->qs, q); break;
    case DType::Q3_K:
      set_crumbs_k(static_cast<BlockQ3_K*>(block)->qs, q);
      set_q3_k_high(static_cast<BlockQ3_K*>(block)->hmask, q);
      break;
    case DType::Q4_K: set_nibbles_k(static_cast<BlockQ4_K*>(block)->qs, q); break;
    case DType::Q5_K: {
      auto* b = static_cast<BlockQ5_K*>(block);
      set_nibbles_k(b->qs, q);
      for (int l = 0; l < 32; ++l) {
        uint8_t bits = 0;
        for (int j = 0; j < 8; ++j) bits |= static_cast<uint8_t>(((q[j * 32 + l] >> 4) & 1) << j);
        b->qh[l] = bits;
      }
      break;
    }
    case DType::Q6_K: {
      auto* b = static_cast<BlockQ6_K*>(block);
      for (int half = 0; half < 2; ++half) {
        uint8_t* ql = b->ql + half * 64;
        uint8_t* qh = b->qh + half * 32;
        const uint8_t* qq = q + half * 128;
        for (int l = 0; l < 32; ++l) {
          const uint8_t q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
          ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
          ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
          qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
      }
      break;
    }
    default: std::abort();
  }
}

void block_codes(DType type, const void* block, uint8_t* q) {
  switch (type) {
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(block);
      for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(b->qs[j] + 127);
      break;
    }
    case DType::Q4_0: nibbles_32(static_cast<const BlockQ4_0*>(block)->qs, q); break;
    case DType::Q4_1: nibbles_32(static_cast<const BlockQ4_1*>(block)->qs, q); break;
    case DType::Q5_0: five_bit_32(static_cast<const BlockQ5_0*>(block)->qs, static_cast<const BlockQ5_0*>(block)->qh, q); break;
    case DType::Q5_1: five_bit_32(static_cast<const BlockQ5_1*>(block)->qs, static_cast<const BlockQ5_1*>(block)->qh, q); break;
    case DType::Q2_K: crumbs_k(static_cast<const BlockQ2_K*>(block)->qs, q); break;
    case DType::Q3_K: {
      const auto* b = static_cast<const BlockQ3_K*>(block);
      crumbs_k(b->qs, q);
      for (int hk = 0; hk < 8; ++hk)
        for (int l = 0; l < 32; ++l) q[32 * hk + l] |= static_cast<uint8_t>(((b->hmask[l] >> hk) & 1) << 2);
      break;
    }
    case DType::Q4_K: nibbles_k(static_cast<const BlockQ4_K*>(block)->qs, q); break;
    case DType::Q5_K: {
      const auto* b = static_cast<const BlockQ5_K*>(block);
      nibbles_k(b->qs, q);
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) q[j * 32 + l] |= static_cast<uint8_t>(((b->qh[l] >> j) & 1) << 4);
      break;
    }
    case DType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(block);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b->ql + half * 64;
        const uint8_t* qh = b->qh + half * 32;
        uint8_t* qq = q + half * 128;
        for (int l = 0; l < 32; ++l) {
          qq[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
          qq[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
          qq[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          qq[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      break;
    }
    default: std::abort();
  }
}

}  // namespace kestrel
