// Integer GEMM on 16-row packed weights with AArch64 NEON sdot: a 128-bit register holds 4 consecutive
// inputs of 4 rows (a quarter of the layout's 64-byte vector), and vdotq_laneq_s32 multiplies it with one
// 4-input group of a token's 8-bit activations, so 4 instructions cover 16 rows x 4 inputs. Each 32-input
// block is unpacked once into signed bytes (Q8_0's +128 removed; 2- to 6-bit codes as they are, their
// offsets folded into the int32 start value or a min term as on x86) and every token of the tile reads it
// from L1. The 2:4 layouts gather each row's kept activations by table lookups (tile_s24).
// Compiled with +dotprod and entered only after run-time detection; internal linkage throughout.
#include <arm_neon.h>

#include <array>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/packed_matrix.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

constexpr size_t kPrefetchBlocks = 8;

// q[4k + r]: inputs 4k..4k+3 of rows 4r..4r+3, for the 8 input groups of a 32-input block.
using BlockBytes = int8x16_t[32];

// A nibble tile (4 x 64 bytes): low nibbles are input groups 0..3, high nibbles 4..7.
inline void unpack_nibbles(const uint8_t* tile, BlockBytes& q) {
  const uint8x16_t m4 = vdupq_n_u8(0xF);
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 4; ++r) {
      const uint8x16_t packed = vld1q_u8(tile + 64 * k + 16 * r);
      q[4 * k + r] = vreinterpretq_s8_u8(vandq_u8(packed, m4));
      q[4 * (k + 4) + r] = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));
    }
}

// A sextet tile (6 x 64 bytes, packed_matrix.h): groups 0..3 are the low six bits of the first four
// vectors; groups 4..7 their top two bits, shifted in (vsli) above the nibbles of the fifth and sixth.
inline void unpack_sextets(const uint8_t* tile, BlockBytes& q) {
  const uint8x16_t m6 = vdupq_n_u8(0x3F);
  for (int r = 0; r < 4; ++r) {
    const uint8x16_t nibbles0 = vld1q_u8(tile + 256 + 16 * r), nibbles1 = vld1q_u8(tile + 320 + 16 * r);
    const uint8x16_t low4[4] = {nibbles0, vshrq_n_u8(nibbles0, 4), nibbles1, vshrq_n_u8(nibbles1, 4)};
    for (int k = 0; k < 4; ++k) {
      const uint8x16_t packed = vld1q_u8(tile + 64 * k + 16 * r);
      q[4 * k + r] = vreinterpretq_s8_u8(vandq_u8(packed, m6));
      q[4 * (k + 4) + r] = vreinterpretq_s8_u8(vsliq_n_u8(low4[k], vshrq_n_u8(packed, 6), 4));
    }
  }
}

// A quint tile (5 x 64 bytes, packed_matrix.h): groups 0..3 are the low five bits of the first four
// vectors; groups 4..7 their top three bits, shifted in (vsli) above the low two from the fifth vector.
inline void unpack_quints(const uint8_t* tile, BlockBytes& q) {
  const uint8x16_t m5 = vdupq_n_u8(0x1F);
  for (int r = 0; r < 4; ++r) {
    const uint8x16_t low_pairs = vld1q_u8(tile + 256 + 16 * r);
    const uint8x16_t low2[4] = {low_pairs, vshrq_n_u8(low_pairs, 2), vshrq_n_u8(low_pairs, 4), vshrq_n_u8(low_pairs, 6)};
    for (int k = 0; k < 4; ++k) {
      const uint8x16_t packed = vld1q_u8(tile + 64 * k + 16 * r);
      q[4 * k + r] = vreinterpretq_s8_u8(vandq_u8(packed, m5));
      q[4 * (k + 4) + r] = vreinterpretq_s8_u8(vsliq_n_u8(low2[k], vshrq_n_u8(packed, 5), 2));
    }
  }
}

// A crumb tile (2 x 64 bytes): bits 2c of vector v's bytes are input group 4v + c's 2-bit codes.
inline void unpack_crumbs(const uint8_t* tile, BlockBytes& q) {
  const uint8x16_t m2 = vdupq_n_u8(3);
  for (int v = 0; v < 2; ++v)
    for (int r = 0; r < 4; ++r) {
      const uint8x16_t packed = vld1q_u8(tile + 64 * v + 16 * r);
      q[4 * (4 * v) + r] = vreinterpretq_s8_u8(vandq_u8(packed, m2));
      q[4 * (4 * v + 1) + r] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(packed, 2), m2));
      q[4 * (4 * v + 2) + r] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(packed, 4), m2));
      q[4 * (4 * v + 3) + r] = vreinterpretq_s8_u8(vshrq_n_u8(packed, 6));
    }
}

// A triad tile (3 x 64 bytes, packed_matrix.h): groups 0..5 lie whole in the three vectors (bits 0-2 and
// 3-5); groups 6 and 7 take their low two bits from the first two vectors' top bits and bit 2 from the third's.
inline void unpack_triads(const uint8_t* tile, BlockBytes& q) {
  const uint8x16_t m3 = vdupq_n_u8(7), bit2 = vdupq_n_u8(4);
  for (int r = 0; r < 4; ++r) {
    uint8x16_t v[3];
    for (int i = 0; i < 3; ++i) {
      v[i] = vld1q_u8(tile + 64 * i + 16 * r);
      q[4 * (2 * i) + r] = vreinterpretq_s8_u8(vandq_u8(v[i], m3));
      q[4 * (2 * i + 1) + r] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v[i], 3), m3));
    }
    q[4 * 6 + r] = vreinterpretq_s8_u8(vsliq_n_u8(vshrq_n_u8(v[0], 6), vshrq_n_u8(v[2], 7), 2));
    q[4 * 7 + r] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v[1], 6), vandq_u8(vshrq_n_u8(v[2], 4), bit2)));
  }
}

// s[r] += rows 4r..4r+3 times the token's inputs of groups [k0, k0 + 4) (x4: those 16 activation bytes).
template <int K0>
inline void dot_groups(const BlockBytes& q, int8x16_t x4, int32x4_t* s) {
  for (int r = 0; r < 4; ++r) {
    s[r] = vdotq_laneq_s32(s[r], q[4 * (K0 + 0) + r], x4, 0);
    s[r] = vdotq_laneq_s32(s[r], q[4 * (K0 + 1) + r], x4, 1);
    s[r] = vdotq_laneq_s32(s[r], q[4 * (K0 + 2) + r], x4, 2);
    s[r] = vdotq_laneq_s32(s[r], q[4 * (K0 + 3) + r], x4, 3);
  }
}

// 16 fp16 values as four float vectors.
inline void load_halves16(const uint8_t* p, float32x4_t* out) {
  for (int r = 0; r < 4; ++r) out[r] = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + 8 * r)));
}
// 16 bytes (unsigned or signed) as four float vectors.
inline void u8x16_to_f32(uint8x16_t v, float32x4_t* out) {
  const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
  out[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
  out[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
  out[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
  out[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}
inline void s8x16_to_f32(int8x16_t v, float32x4_t* out) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
  out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  out[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
  out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  out[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

// One token's int32 row sums of a 32-input block, started at `start` (the offset terms).
inline void block_sums(const BlockBytes& q, const BlockQ8A& xb, int32x4_t start, int32x4_t* s) {
  for (int r = 0; r < 4; ++r) s[r] = start;
  dot_groups<0>(q, vld1q_s8(xb.qs), s);
  dot_groups<4>(q, vld1q_s8(xb.qs + 16), s);
}

// Puts one token's 16 row results (four vectors) at y: written, or added (PackedView::accumulate).
inline void store_rows(const PackedView& w, float* y, const float32x4_t* rows) {
  for (int r = 0; r < 4; ++r) vst1q_f32(y + 4 * r, w.accumulate ? vaddq_f32(vld1q_f32(y + 4 * r), rows[r]) : rows[r]);
}

// The 32-input layouts (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1): one scale (and min) per row and block.
template <PackedLayout L, int T>
void tile_32(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  constexpr bool kFiveBit = L == PackedLayout::Q5_0x16 || L == PackedLayout::Q5_1x16;
  constexpr bool kMin = L == PackedLayout::Q4_1x16 || L == PackedLayout::Q5_1x16;  // fp16 m[16] after d[16]
  constexpr size_t kTile = kMin ? 64 : 32;                                            // where the codes start
  constexpr int kOffset = L == PackedLayout::Q4_0x16 ? 8 : L == PackedLayout::Q5_0x16 ? 16 : 0;  // stored code - weight's
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  BlockBytes q;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4], m[4];
    load_halves16(blk, d);
    if constexpr (kMin) load_halves16(blk + 32, m);
    if constexpr (L == PackedLayout::Q8_0x16) {
      for (int i = 0; i < 32; ++i) q[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk + 32 + 16 * i), vdupq_n_u8(0x80)));
    } else {
      if constexpr (kFiveBit) {
        unpack_quints(blk + kTile, q);
      } else {
        unpack_nibbles(blk + kTile, q);
      }
    }
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) {
      const BlockQ8A& xb = xq[static_cast<size_t>(t) * nb + b];
      int32x4_t s[4];
      block_sums(q, xb, vdupq_n_s32(-kOffset * xb.sum()), s);
      for (int r = 0; r < 4; ++r) {
        acc[4 * t + r] = vfmaq_f32(acc[4 * t + r], vcvtq_f32_s32(s[r]), vmulq_n_f32(d[r], xb.d));
        if constexpr (kMin) acc[4 * t + r] = vfmaq_f32(acc[4 * t + r], m[r], vdupq_n_f32(xb.d * static_cast<float>(xb.sum())));
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// Q4_K: per 32-input sub-block j, w = d sc_j q - dmin m_j; scales and mins are 6-bit codes packed as in the
// file (byte k of the 16 rows at scales + 16 k). Q5_K: the same head, then a quint tile per sub-block.
template <PackedLayout L, int T>
void tile_q4_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  BlockBytes q;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4], dmin[4];
    load_halves16(blk, d);
    load_halves16(blk + 32, dmin);
    uint8x16_t codes[12];
    for (int k = 0; k < 12; ++k) codes[k] = vld1q_u8(blk + 64 + 16 * k);
    const uint8x16_t low6 = vdupq_n_u8(63), low4 = vdupq_n_u8(0xF);
    for (int j = 0; j < 8; ++j) {
      const uint8x16_t sc = j < 4 ? vandq_u8(codes[j], low6)
                                  : vorrq_u8(vandq_u8(codes[j + 4], low4), vshlq_n_u8(vshrq_n_u8(codes[j - 4], 6), 4));
      const uint8x16_t mn = j < 4 ? vandq_u8(codes[j + 4], low6)
                                  : vorrq_u8(vshrq_n_u8(codes[j + 4], 4), vshlq_n_u8(vshrq_n_u8(codes[j], 6), 4));
      float32x4_t scale[4], min[4];
      u8x16_to_f32(sc, scale);
      u8x16_to_f32(mn, min);
      for (int r = 0; r < 4; ++r) {
        scale[r] = vmulq_f32(scale[r], d[r]);
        min[r] = vmulq_f32(min[r], dmin[r]);
      }
      if constexpr (L == PackedLayout::Q5_Kx16) {
        unpack_quints(blk + 256 + 320 * j, q);
      } else {
        unpack_nibbles(blk + 256 + 256 * j, q);
      }
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        int32x4_t s[4];
        block_sums(q, xb, vdupq_n_s32(0), s);
        const float xsum = xb.d * static_cast<float>(xb.sum());
        for (int r = 0; r < 4; ++r) {
          acc[4 * t + r] = vfmaq_f32(acc[4 * t + r], vcvtq_f32_s32(s[r]), vmulq_n_f32(scale[r], xb.d));
          acc[4 * t + r] = vfmsq_f32(acc[4 * t + r], min[r], vdupq_n_f32(xsum));
        }
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// acc[r] += one token's products of a 32-input block for rows 4r..4r+3, its two 16-input halves with their
// own scales sc[h][r] (d folded in) and codes kOffset above the weights' (Q2_K 0, Q3_K 4, Q6_K 32).
template <int kOffset>
inline void add_half_scaled_products(const BlockBytes& q, const BlockQ8A& xb, const float32x4_t (&sc)[2][4], float32x4_t* acc) {
  int32x4_t s0[4], s1[4];
  for (int r = 0; r < 4; ++r) {
    s0[r] = vdupq_n_s32(-kOffset * xb.sum16[0]);
    s1[r] = vdupq_n_s32(-kOffset * xb.sum16[1]);
  }
  dot_groups<0>(q, vld1q_s8(xb.qs), s0);
  dot_groups<4>(q, vld1q_s8(xb.qs + 16), s1);
  for (int r = 0; r < 4; ++r) {
    acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s0[r]), vmulq_n_f32(sc[0][r], xb.d));
    acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(s1[r]), vmulq_n_f32(sc[1][r], xb.d));
  }
}

// Q6_K: w = d sc (q - 32) with q in 0..63 and one scale per 16 inputs (sc0: inputs 0..15, sc1: 16..31).
template <int T>
void tile_q6_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  BlockBytes q;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4];
    load_halves16(blk, d);
    for (int j = 0; j < 8; ++j) {
      float32x4_t sc[2][4];  // [inputs 16h..16h+15][rows 4r..4r+3], times d
      for (int h = 0; h < 2; ++h) {
        s8x16_to_f32(vld1q_s8(reinterpret_cast<const int8_t*>(blk + 32 + 32 * j + 16 * h)), sc[h]);
        for (int r = 0; r < 4; ++r) sc[h][r] = vmulq_f32(sc[h][r], d[r]);
      }
      unpack_sextets(blk + 288 + 384 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        add_half_scaled_products<32>(q, xq[static_cast<size_t>(t) * nxb + b * 8 + j], sc, acc + 4 * t);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// Q2_K: per 16-input sub-block, w = d sc q - dmin m with q in 0..3 and the 4-bit sc, m of one byte (the 16
// rows' bytes of sub-block s at scales + 16 s).
template <int T>
void tile_q2_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  BlockBytes q;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4], dmin[4];
    load_halves16(blk, d);
    load_halves16(blk + 32, dmin);
    for (int j = 0; j < 8; ++j) {
      float32x4_t sc[2][4], mn[2][4];  // [sub-block 2j + h][rows 4r..4r+3], times d or dmin
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t bytes = vld1q_u8(blk + 64 + 16 * (2 * j + h));
        u8x16_to_f32(vandq_u8(bytes, vdupq_n_u8(0xF)), sc[h]);
        u8x16_to_f32(vshrq_n_u8(bytes, 4), mn[h]);
        for (int r = 0; r < 4; ++r) {
          sc[h][r] = vmulq_f32(sc[h][r], d[r]);
          mn[h][r] = vmulq_f32(mn[h][r], dmin[r]);
        }
      }
      unpack_crumbs(blk + 320 + 128 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        add_half_scaled_products<0>(q, xb, sc, acc + 4 * t);
        const float32x4_t xsum0 = vdupq_n_f32(xb.d * static_cast<float>(xb.sum16[0]));
        const float32x4_t xsum1 = vdupq_n_f32(xb.d * static_cast<float>(xb.sum16[1]));
        for (int r = 0; r < 4; ++r) acc[4 * t + r] = vfmsq_f32(vfmsq_f32(acc[4 * t + r], mn[0][r], xsum0), mn[1][r], xsum1);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// Q3_K: per 16-input sub-block, w = d (sc - 32) (q - 4) with q in 0..7, the 6-bit sc packed as in the file:
// sub-block s's low 4 bits in byte s % 8 (low nibble for s < 8), its top 2 at bits 2 (s / 4) of byte
// 8 + s % 4 (byte k of the 16 rows at scales + 16 k).
template <int T>
void tile_q3_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  BlockBytes q;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4];
    load_halves16(blk, d);
    uint8x16_t codes[12];
    for (int k = 0; k < 12; ++k) codes[k] = vld1q_u8(blk + 32 + 16 * k);
    for (int j = 0; j < 8; ++j) {
      float32x4_t sc[2][4];  // [sub-block 2j + h][rows 4r..4r+3], times d
      for (int h = 0; h < 2; ++h) {
        const int sub = 2 * j + h;
        const uint8x16_t low = sub < 8 ? vandq_u8(codes[sub % 8], vdupq_n_u8(0xF)) : vshrq_n_u8(codes[sub % 8], 4);
        const uint8x16_t top = vandq_u8(vshlq_u8(codes[8 + sub % 4], vdupq_n_s8(static_cast<int8_t>(-2 * (sub / 4)))), vdupq_n_u8(3));
        s8x16_to_f32(vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(top, 4))), vdupq_n_s8(32)), sc[h]);
        for (int r = 0; r < 4; ++r) sc[h][r] = vmulq_f32(sc[h][r], d[r]);
      }
      unpack_triads(blk + 224 + 192 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        add_half_scaled_products<4>(q, xq[static_cast<size_t>(t) * nxb + b * 8 + j], sc, acc + 4 * t);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// tile_s24's controls: byte m of row i (byte 4 i + m of 4 rows' 16) takes byte 2 (p % 2) + m / 2 of the
// row's metadata dword (kS24NeonSpread[p % 2]), then shifts right by the nibble's place (4 a) and the
// position's in it (2 (m % 2)) (kS24NeonShift[a], negative: vshlq shifts right).
inline constexpr std::array<std::array<uint8_t, 16>, 2> kS24NeonSpread = [] {
  std::array<std::array<uint8_t, 16>, 2> t{};
  for (int q = 0; q < 2; ++q)
    for (int i = 0; i < 16; ++i) t[q][i] = static_cast<uint8_t>(4 * (i / 4) + 2 * q + (i % 4) / 2);
  return t;
}();
inline constexpr std::array<std::array<int8_t, 16>, 2> kS24NeonShift = [] {
  std::array<std::array<int8_t, 16>, 2> t{};
  for (int a = 0; a < 2; ++a)
    for (int i = 0; i < 16; ++i) t[a][i] = static_cast<int8_t>(-(4 * a + 2 * (i % 2)));
  return t;
}();

// The 2:4 integer layouts (S24_Q8x16, S24_Q4x16; packed_sparse24.h) at any token count: per pair of
// 4-input groups and 4 rows, a table lookup spreads each row's two position nibbles over its 4 control
// bytes, a per-byte shift and an and keep its 4 positions, the control offsets pick the group, and a
// second lookup gathers the row's 4 kept activations (of the pair's 8, held twice in the table) next to
// its 4 kept signed codes for one sdot. The controls are made once per tile and serve every token.
template <PackedLayout L, int T>
void tile_s24(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  constexpr bool kQ8 = sparse24_q8_values(L);
  const uint8x16_t spread[2] = {vld1q_u8(kS24NeonSpread[0].data()), vld1q_u8(kS24NeonSpread[1].data())};
  const int8x16_t shift[2] = {vld1q_s8(kS24NeonShift[0].data()), vld1q_s8(kS24NeonShift[1].data())};
  const uint8x16_t offsets = vreinterpretq_u8_u32(vdupq_n_u32(kSparse24ControlOffsets)), three = vdupq_n_u8(3);
  float32x4_t acc[4 * T];
  for (int i = 0; i < 4 * T; ++i) acc[i] = vdupq_n_f32(0);
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    float32x4_t d[4];
    load_halves16(blk, d);
    const uint8_t* meta = blk + sparse24_meta_offset(L);
    for (int a = 0; a < 2; ++a) {  // the block's two 32-input activation blocks
      int32x4_t sum[4 * T];
      for (int i = 0; i < 4 * T; ++i) sum[i] = vdupq_n_s32(0);
      for (int p = 0; p < 4; ++p) {  // pairs of groups
        uint8x16_t ctrl[4];
        int8x16_t wv[4];  // rows 4r..4r+3: [4] signed kept codes
        for (int r = 0; r < 4; ++r) {
          const uint8x16_t dwords = vld1q_u8(meta + 64 * (p / 2) + 16 * r);
          const uint8x16_t positions = vandq_u8(vshlq_u8(vqtbl1q_u8(dwords, spread[p % 2]), shift[a]), three);
          ctrl[r] = vorrq_u8(positions, offsets);
          if constexpr (kQ8) {
            wv[r] = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 32 + 64 * (4 * a + p) + 16 * r));
          } else {
            const uint8x16_t packed = vld1q_u8(blk + 32 + 64 * p + 16 * r);
            wv[r] = vsubq_s8(vreinterpretq_s8_u8(a == 0 ? vandq_u8(packed, vdupq_n_u8(0xF)) : vshrq_n_u8(packed, 4)), vdupq_n_s8(8));
          }
        }
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) {
          const int8x8_t x8 = vld1_s8(xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p);
          const int8x16_t x16 = vcombine_s8(x8, x8);
          for (int r = 0; r < 4; ++r) sum[4 * t + r] = vdotq_s32(sum[4 * t + r], wv[r], vqtbl1q_s8(x16, ctrl[r]));
        }
      }
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const float dx = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].d;
        for (int r = 0; r < 4; ++r) acc[4 * t + r] = vfmaq_f32(acc[4 * t + r], vcvtq_f32_s32(sum[4 * t + r]), vmulq_n_f32(d[r], dx));
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc + 4 * t);
}

// The tiles of each layout, for the shared driver (gemm_driver.h).
struct NeonTiles {
  static constexpr bool kSparse24Wide = false;  // the 2:4 layouts' direct tiles at every token count
  static constexpr int kTokens = 4;  // tokens per register tile
  static constexpr int64_t kGroupChunk = 4;  // row groups whose weights stay in cache while token tiles pass
  template <PackedLayout L, int T>
  static void tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
    if constexpr (L == PackedLayout::Q4_Kx16 || L == PackedLayout::Q5_Kx16)
      tile_q4_k<L, T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q2_Kx16)
      tile_q2_k<T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q3_Kx16)
      tile_q3_k<T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::S24_Q8x16 || L == PackedLayout::S24_Q4x16)
      tile_s24<L, T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q6_Kx16)
      tile_q6_k<T>(w, xq, nb, y, ys, g, after);
    else
      tile_32<L, T>(w, xq, nb, y, ys, g, after);
  }
};

}  // namespace

PackedGemmFn packed_gemm_kernel_neon(PackedLayout layout) { return packed_gemm_table<NeonTiles>(layout); }

}  // namespace kestrel
