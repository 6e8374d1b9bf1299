// Integer GEMM on 16-row packed weights with AVX-512 VNNI: lanes are the 16 rows of a group, one
// vpdpbusd multiplies them by 4 inputs of one token, and a 32-input block is scaled once per token.
// Compiled with AVX-512 flags and only entered after run-time detection; internal linkage throughout.
#include <immintrin.h>

#include <cstring>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/gemm_sparse_int_avx512_impl.h"
#include "compute/cpu/gemm_tiles_avx512.h"
#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

// The 16 rows' codes of one 32-input crumb tile: q[k] = inputs 4k..4k+3, 2 bits.
inline void load_crumb_tile(const uint8_t* tile, __m512i (&q)[8]) {
  const __m512i m2 = _mm512_set1_epi8(3);
  const __m512i v0 = _mm512_loadu_si512(tile), v1 = _mm512_loadu_si512(tile + 64);
  for (int c = 0; c < 4; ++c) {
    q[c] = _mm512_and_si512(_mm512_srli_epi16(v0, 2 * c), m2);
    q[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v1, 2 * c), m2);
  }
}
// The 16 rows' codes of one 32-input triad tile (3-bit codes): q[k] = inputs 4k..4k+3; groups 0..5 lie whole
// in the tile's three vectors, groups 6 and 7 join two top bits of the first two with a bit of the third
// (one ternary-logic select, then an AND).
inline void load_triad_tile(const uint8_t* tile, __m512i (&q)[8]) {
  const __m512i low3 = _mm512_set1_epi8(7), low2 = _mm512_set1_epi8(3);
  __m512i v[3];
  KESTREL_UNROLL
  for (int i = 0; i < 3; ++i) {
    v[i] = _mm512_loadu_si512(tile + 64 * i);
    q[2 * i] = _mm512_and_si512(v[i], low3);
    q[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(v[i], 3), low3);
  }
  // (a & c) | (b & ~c): bits 0-1 from a, bit 2 (and above, cleared after) from b
  q[6] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v[0], 6), _mm512_srli_epi16(v[2], 5), low2, 0xE4), low3);
  q[7] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v[1], 6), _mm512_srli_epi16(v[2], 4), low2, 0xE4), low3);
}

// The 16 rows' codes of one 32-input nibble tile: q[k] = inputs 4k..4k+3.
inline void load_nibble_tile(const uint8_t* tile, __m512i (&q)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  for (int k = 0; k < 4; ++k) {
    const __m512i packed = _mm512_loadu_si512(tile + 64 * k);
    q[k] = _mm512_and_si512(packed, m4);
    q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), m4);
  }
}
// The 16 rows' codes of one 32-input quint tile (5-bit codes): q[k] = inputs 4k..4k+3; groups 4..7 join the
// top three bits kept above groups 0..3 with the low two from the tile's fifth vector (one ternary-logic
// a | (b & c)).
inline void load_quint_tile(const uint8_t* tile, __m512i (&q)[8]) {
  const __m512i low5 = _mm512_set1_epi8(0x1F), bits2to4 = _mm512_set1_epi8(0x1C), low2 = _mm512_set1_epi8(3);
  const __m512i low_pairs = _mm512_loadu_si512(tile + 256);
  KESTREL_UNROLL
  for (int k = 0; k < 4; ++k) {
    const __m512i packed = _mm512_loadu_si512(tile + 64 * k);
    q[k] = _mm512_and_si512(packed, low5);
    const __m512i top3 = _mm512_and_si512(_mm512_srli_epi16(packed, 3), bits2to4);
    q[k + 4] = _mm512_ternarylogic_epi32(top3, k == 0 ? low_pairs : _mm512_srli_epi16(low_pairs, 2 * k), low2, 0xF8);
  }
}

// The 16 rows' codes of one 32-input sextet tile (6-bit codes): q[k] = inputs 4k..4k+3; groups 4..7 join
// the top two bits kept above groups 0..3 with the nibbles of the tile's fifth and sixth vectors.
inline void load_sextet_tile(const uint8_t* tile, __m512i (&q)[8]) {
  const __m512i low6 = _mm512_set1_epi8(0x3F), bits4to5 = _mm512_set1_epi8(0x30), low4 = _mm512_set1_epi8(0xF);
  const __m512i nibbles[2] = {_mm512_loadu_si512(tile + 256), _mm512_loadu_si512(tile + 320)};
  KESTREL_UNROLL
  for (int k = 0; k < 4; ++k) {
    const __m512i packed = _mm512_loadu_si512(tile + 64 * k);
    q[k] = _mm512_and_si512(packed, low6);
    const __m512i top2 = _mm512_and_si512(_mm512_srli_epi16(packed, 2), bits4to5);
    q[k + 4] = _mm512_ternarylogic_epi32(top2, k % 2 ? _mm512_srli_epi16(nibbles[k / 2], 4) : nibbles[k / 2], low4, 0xF8);
  }
}

// acc[t] += the products of one 32-input block of the 32-input layout L (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1) with
// token t's activation block xq[t * x_stride + b]: q[k] the 16 rows' stored codes of inputs 4k..4k+3, d (and
// m) their scales (and mins).
template <PackedLayout L, int T>
inline void add_block_products(const __m512i (&q)[8], __m512 d, __m512 m, const BlockQ8A* xq, size_t x_stride, size_t b,
                               __m512 (&acc)[T]) {
  constexpr bool kMin = L == PackedLayout::Q4_1x16 || L == PackedLayout::Q5_1x16;
  // stored value minus this = quantized weight
  constexpr int kOffset = L == PackedLayout::Q4_0x16 ? 8 : L == PackedLayout::Q5_0x16 ? 16 : L == PackedLayout::Q8_0x16 ? 128 : 0;
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) {
    const BlockQ8A& xb = xq[static_cast<size_t>(t) * x_stride + b];
    const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
    __m512i s0 = _mm512_set1_epi32(-kOffset * (xb.sum16[0] + xb.sum16[1])), s1 = _mm512_setzero_si512();
    for (int k = 0; k < 8; k += 2) {
      s0 = _mm512_dpbusd_epi32(s0, q[k], _mm512_set1_epi32(x4[k]));
      s1 = _mm512_dpbusd_epi32(s1, q[k + 1], _mm512_set1_epi32(x4[k + 1]));
    }
    const __m512 dx = _mm512_set1_ps(xb.d);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(d, dx), acc[t]);
    if constexpr (kMin) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xb.d * static_cast<float>(xb.sum())), acc[t]);
  }
}

// The 32-input layouts: Q4_0, Q8_0, Q4_1, Q5_0, Q5_1 (packed_matrix.h).
template <PackedLayout L, int T>
void tile_32(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  constexpr bool kFiveBit = L == PackedLayout::Q5_0x16 || L == PackedLayout::Q5_1x16;
  constexpr bool kMin = L == PackedLayout::Q4_1x16 || L == PackedLayout::Q5_1x16;  // fp16 m[16] after d[16]
  constexpr size_t kTile = kMin ? 64 : 32;  // where the codes start
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * static_cast<size_t>(w.n_blocks) + b) * w.block_bytes;
    // Software prefetch a few blocks ahead: with several tokens per block the out-of-order window spans
    // too few blocks to keep enough loads in flight while weights stream from memory.
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks32, nb, w.block_bytes, after), w.block_bytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));  // [16] row scales
    __m512 m = _mm512_setzero_ps();  // [16] row mins
    if constexpr (kMin) m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    __m512i q[8];  // q[k] = inputs 4k..4k+3 of the 16 rows
    if constexpr (L == PackedLayout::Q8_0x16) {
      for (int k = 0; k < 8; ++k) q[k] = _mm512_loadu_si512(blk + 32 + 64 * k);
    } else if constexpr (kFiveBit) {
      load_quint_tile(blk + kTile, q);
    } else {
      load_nibble_tile(blk + kTile, q);
    }
    add_block_products<L, T>(q, d, m, xq, nb, b, acc);
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

constexpr size_t kPrefetchSuperBlocks = 2;  // super-blocks ahead; measured against 1, 3 and 5

// The 8 sub-blocks' scales and mins of 16 rows, out[0][j] and out[1][j], decoded from their packed 6-bit
// codes: scales[k][16] holds byte k of each row's 12 (the file's layout: for j < 4 the low 6 bits of bytes
// j and j + 4; beyond that 4 bits from byte j + 4 and the top 2 bits of bytes j - 4 and j). Four
// sub-blocks per 512-bit operation, once per super-block.
inline void q4_k_scales_mins_x16(const uint8_t* scales, uint8_t (*out)[8][16]) {
  const __m512i codes0 = _mm512_loadu_si512(scales), codes1 = _mm512_loadu_si512(scales + 64);  // bytes 0-3, 4-7
  const __m512i codes2 = _mm512_loadu_si512(scales + 128);                                       // bytes 8-11
  const __m512i low6 = _mm512_set1_epi8(63), low4 = _mm512_set1_epi8(0xF), low2 = _mm512_set1_epi8(3);
  const auto top2 = [&](__m512i x) { return _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(x, 6), low2), 4); };
  _mm512_storeu_si512(out[0][0], _mm512_and_si512(codes0, low6));
  _mm512_storeu_si512(out[1][0], _mm512_and_si512(codes1, low6));
  _mm512_storeu_si512(out[0][4], _mm512_or_si512(_mm512_and_si512(codes2, low4), top2(codes0)));
  _mm512_storeu_si512(out[1][4], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(codes2, 4), low4), top2(codes1)));
}

// K-quant tiles: one block is a 256-input super-block, eight 32-input activation blocks. Q4_K, and Q5_K
// (the same head, then a quint tile per sub-block).
template <PackedLayout L, int T>
void tile_q4_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;  // activation blocks per token
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    // Per super-block: sums over its sub-blocks of sc * (q . x) and of m * sum(x), scaled by d and dmin
    // once at the end (the min sums accumulate apart, off the main dependency chain).
    __m512 sb[T], sb_min[T];
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = sb_min[t] = _mm512_setzero_ps();
    alignas(64) uint8_t scales_mins[2][8][16];  // [scale | min][sub-block][row]
    q4_k_scales_mins_x16(blk + 64, scales_mins);
    for (int j = 0; j < 8; ++j) {
      prefetch_superblock_part(ahead, w.block_bytes, j);
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales_mins[0][j]))));
      const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales_mins[1][j]))));
      __m512i q[8];
      if constexpr (L == PackedLayout::Q5_Kx16) {
        load_quint_tile(blk + 256 + 320 * j, q);
      } else {
        load_nibble_tile(blk + 256 + 256 * j, q);
      }
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
          s0 = _mm512_dpbusd_epi32(s0, q[k], _mm512_set1_epi32(x4[k]));
          s1 = _mm512_dpbusd_epi32(s1, q[k + 1], _mm512_set1_epi32(x4[k + 1]));
        }
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(sc, _mm512_set1_ps(xb.d)), sb[t]);
        sb_min[t] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xb.d * static_cast<float>(xb.sum16[0] + xb.sum16[1])), sb_min[t]);
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(d, sb[t], _mm512_fnmadd_ps(dmin, sb_min[t], acc[t]));
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

// Per 32-input activation block, the dot products of its two 16-input halves (k-groups 0..3 and 4..7), each
// starting from its own offset term.
inline void dot_halves(const __m512i (&q)[8], const BlockQ8A& xb, __m512i& s0, __m512i& s1) {
  const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
  for (int k = 0; k < 4; ++k) {
    s0 = _mm512_dpbusd_epi32(s0, q[k], _mm512_set1_epi32(x4[k]));
    s1 = _mm512_dpbusd_epi32(s1, q[k + 4], _mm512_set1_epi32(x4[k + 4]));
  }
}

// Per 32-bit lane, the low int16 of `first` and the low int16 of `second` (as the lane's high int16).
inline __m512i int16_lows(__m512i first, __m512i second) {
  return _mm512_mask_blend_epi16(0xAAAAAAAA, first, _mm512_slli_epi32(second, 16));
}
// Token x's two 16-input activation sums as the int16 pair of every 32-bit lane.
inline __m512i activation_half_sums(const BlockQ8A& x) {
  int32_t sums;
  std::memcpy(&sums, x.sum16, 4);
  return _mm512_set1_epi32(sums);
}

// dot_halves from zero as the int16 pair of each row's lane (low: the first half), for one madd to apply both
// sub-blocks' scales; codes below 8 (16 x 7 x 127 fits int16).
inline __m512i half_dot_pairs(const __m512i (&q)[8], const BlockQ8A& xb) {
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  dot_halves(q, xb, s0, s1);
  return int16_lows(s0, s1);
}

// Q2_K: per 16-input sub-block, w = d * sc * q - dmin * m with q in 0..3 and the 4-bit sc, m of one byte.
// One madd applies a 32-input block's two sub-block scales (half_dot_pairs), the mins meet the
// activations' half sums in another, and d and dmin scale the super-block's sums once per token.
template <int T>
void tile_q2_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  const __m512i low4 = _mm512_set1_epi16(0xF);
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    __m512 sb[T], sb_min[T];  // the super-block's sums times the activation scales, before d and dmin
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = sb_min[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      prefetch_superblock_part(ahead, w.block_bytes, j);
      const __m512i raw0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 + 32 * j)));
      const __m512i raw1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 80 + 32 * j)));
      const __m512i bytes = int16_lows(raw0, raw1);  // per row: (byte of sub-block 2j, byte of 2j + 1)
      const __m512i scales = _mm512_and_si512(bytes, low4), mins = _mm512_srli_epi16(bytes, 4);
      __m512i q[8];
      load_crumb_tile(blk + 320 + 128 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        const __m512i s = _mm512_madd_epi16(half_dot_pairs(q, xb), scales);
        const __m512i m = _mm512_madd_epi16(mins, activation_half_sums(xb));
        const __m512 dx = _mm512_set1_ps(xb.d);
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dx, sb[t]);
        sb_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dx, sb_min[t]);
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(d, sb[t], _mm512_fnmadd_ps(dmin, sb_min[t], acc[t]));
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

// The 16 sub-blocks' scales (6-bit code - 32) of 16 rows, out[j][row], from the packed codes (scales[12][16]:
// byte k of each row's 12, as in the file: the low 4 bits in bytes j % 8 (low nibble for j < 8), the top 2
// at bits 2 (j / 4) of byte 8 + j % 4; quant/blocks.h q3_k_scale).
inline void q3_k_scales_x16(const uint8_t* scales, int8_t (*out)[16]) {
  const __m512i a = _mm512_loadu_si512(scales), b = _mm512_loadu_si512(scales + 64), c = _mm512_loadu_si512(scales + 128);
  const __m512i low4 = _mm512_set1_epi8(0xF), low2 = _mm512_set1_epi8(3), bias = _mm512_set1_epi8(32);
  const auto top2 = [&](int shift) { return _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(c, shift), low2), 4); };
  const auto store = [&](int j, __m512i low) { _mm512_storeu_si512(out[j], _mm512_sub_epi8(_mm512_or_si512(low, top2(j / 2)), bias)); };
  store(0, _mm512_and_si512(a, low4));
  store(4, _mm512_and_si512(b, low4));
  store(8, _mm512_and_si512(_mm512_srli_epi16(a, 4), low4));
  store(12, _mm512_and_si512(_mm512_srli_epi16(b, 4), low4));
}

// Q3_K: per 16-input sub-block, w = d * sc * (q - 4) with q in 0..7.
template <int T>
void tile_q3_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    alignas(64) int8_t scales[16][16];  // [sub-block][row]
    q3_k_scales_x16(blk + 32, scales);
    __m512 sb[T];
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      prefetch_superblock_part(ahead, w.block_bytes, j);
      const __m512 sc0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales[2 * j]))));
      const __m512 sc1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales[2 * j + 1]))));
      __m512i q[8];
      load_triad_tile(blk + 224 + 192 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        __m512i s0 = _mm512_set1_epi32(-4 * xb.sum16[0]), s1 = _mm512_set1_epi32(-4 * xb.sum16[1]);
        dot_halves(q, xb, s0, s1);
        const __m512 dx = _mm512_set1_ps(xb.d);
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(sc0, dx), sb[t]);
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(sc1, dx), sb[t]);
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(d, sb[t], acc[t]);
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

template <int T>
void tile_q6_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    for (int j = 0; j < 8; ++j) {
      prefetch_superblock_part(ahead, w.block_bytes, j);
      const __m512 sc0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 32 * j)))));
      const __m512 sc1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 48 + 32 * j)))));
      __m512i q[8];
      load_sextet_tile(blk + 288 + 384 * j, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
        __m512i s0 = _mm512_set1_epi32(-32 * xb.sum16[0]), s1 = _mm512_set1_epi32(-32 * xb.sum16[1]);
        for (int k = 0; k < 4; ++k) {
          s0 = _mm512_dpbusd_epi32(s0, q[k], _mm512_set1_epi32(x4[k]));
          s1 = _mm512_dpbusd_epi32(s1, q[k + 4], _mm512_set1_epi32(x4[k + 4]));
        }
        const __m512 dx = _mm512_set1_ps(xb.d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(sc0, dx), acc[t]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(sc1, dx), acc[t]);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

// The tiles of each layout, for the shared driver (gemm_driver.h).
struct Avx512Tiles : Avx512Sparse24Tiles<NibbleControls> {
  static constexpr bool kSparse24Wide = true;
  template <PackedLayout L, int T>
  static void tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
    if constexpr (L == PackedLayout::Q4_Kx16 || L == PackedLayout::Q5_Kx16)
      tile_q4_k<L, T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q6_Kx16)
      tile_q6_k<T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q2_Kx16)
      tile_q2_k<T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::Q3_Kx16)
      tile_q3_k<T>(w, xq, nb, y, ys, g, after);
    else if constexpr (L == PackedLayout::S24_Q8x16 || L == PackedLayout::S24_Q4x16)
      Avx512Sparse24Tiles<NibbleControls>::tile<L, T>(w, xq, nb, y, ys, g, after);
    else
      tile_32<L, T>(w, xq, nb, y, ys, g, after);
  }
};

}  // namespace

PackedGemmFn packed_gemm_kernel_avx512(PackedLayout layout) {
  return packed_gemm_table<Avx512Tiles>(layout);
}

}  // namespace kestrel
