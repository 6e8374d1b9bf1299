// The AVX-512 tiles of the 2:4 integer layouts (S24_Q8x16, S24_Q4x16; packed_sparse24.h), written once over
// how a row's byte-shuffle controls are made from the block's positions: NibbleControls here (shuffles and
// shifts, AVX-512 BW), BitFieldControls in gemm_sparse_avx512vbmi.cpp (a bit-field byte move, VBMI). Include
// only from files compiled for AVX-512; internal linkage.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/gemm_tiles_avx512.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

// The controls of pair p of activation block a for the 16 rows, by shuffles and shifts (packed_sparse24.h):
// one shuffle, two shifts (one for block 1), an or and a ternary logic per pair. meta: the block's positions.
struct NibbleControls {
  const __m512i spread[2] = {_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSparse24Spread[0].data()))),
                             _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSparse24Spread[1].data())))};
  const __m512i three = _mm512_set1_epi8(3), offsets = _mm512_set1_epi32(static_cast<int>(kSparse24ControlOffsets));
  __m512i operator()(const uint8_t* meta, int a, int p) const {
    __m512i rows = _mm512_loadu_si512(meta + 64 * (p / 2));  // [16 rows] dword p / 2
    if (a == 1) rows = _mm512_srli_epi16(rows, 4);
    const __m512i s = _mm512_shuffle_epi8(rows, spread[p % 2]);
    return _mm512_ternarylogic_epi32(_mm512_or_si512(s, _mm512_slli_epi16(s, 6)), three, offsets, 0xEA);  // (x & 3) | offsets
  }
};

// The 16 rows' Q4 codes (0..15) of pair p of activation block a: [16 rows][4].
inline __m512i s24_q4_codes(const uint8_t* blk, int a, int p) {
  const __m512i packed = _mm512_loadu_si512(blk + 32 + 64 * p);
  return _mm512_and_si512(a == 0 ? packed : _mm512_srli_epi16(packed, 4), _mm512_set1_epi8(0xF));
}
// The 16 rows' signed kept codes of pair p of activation block a (Q8: as stored; Q4: q - 8): [16 rows][4].
template <bool kQ8>
inline __m512i s24_signed_codes(const uint8_t* blk, int a, int p) {
  if constexpr (kQ8) return _mm512_loadu_si512(blk + 32 + 64 * (4 * a + p));
  return _mm512_sub_epi8(s24_q4_codes(blk, a, p), _mm512_set1_epi8(8));
}
// Token t's 8 activation codes of pair p of activation block a of weight block b, in every 64-bit lane.
inline __m512i activations8(const BlockQ8A* xq, int t, size_t nb, size_t b, int a, int p) {
  long long x8;
  std::memcpy(&x8, xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p, 8);
  return _mm512_set1_epi64(x8);
}

// acc[t] += (sum[t] - offset_terms) of activation block a of weight block b for token t, as floats times the
// rows' scales d and the block's activation scale (offset_terms: 128 x the rows' kept-code sums, what the
// unsigned activations add).
template <int T>
inline void add_s24_block_sums(const __m512i (&sum)[T], __m512i offset_terms, __m512 d, const BlockQ8A* xq, size_t nb, size_t b, int a,
                               __m512 (&acc)[T]) {
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) {
    const float dx = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].d;
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum[t], offset_terms)), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[t]);
  }
}

// The 2:4 integer layouts (packed_matrix.h, packed_sparse24.h), a few tokens: per pair of 4-input groups,
// Controls makes each row's byte-shuffle control from the block's positions, one shuffle gathers the
// activations at the row's 4 kept inputs (of the pair's 8) next to its 4 kept signed weights, and one
// dpbusd multiplies them. The activations are made unsigned (x ^ 0x80 = x + 128 per byte) as they are
// broadcast, so 128 x the rows' weight sums, taken once for all tokens, comes off at the end of each
// activation block.
//
// S24_Q4 with up to 4 tokens: the codes q (0..15) are the unsigned operand and the shuffled activations the
// signed one, as they are: sum (q - 8) x = dpbusd(q, x) - dpbusd(8, x), two dpbusd per token where the
// weight-sum scheme spends the signed codes' subtraction, the weight sum and a flip per token (more tokens
// keep that scheme: two accumulators per token would not fit the registers).
template <PackedLayout L, int T, class Controls>
void tile_s24(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  constexpr bool kQ8 = sparse24_q8_values(L);
  constexpr bool kQ4Unsigned = !kQ8 && T <= 4;
  const Controls controls;
  const __m512i eight = _mm512_set1_epi8(8), ones = _mm512_set1_epi8(1);
  const __m512i to_unsigned = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * static_cast<size_t>(w.n_blocks) + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, T > 1 ? kPrefetchBlocks : kPrefetchSparseDecode, nb, w.block_bytes, after), w.block_bytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));  // [16] row scales
    const uint8_t* meta = blk + sparse24_meta_offset(L);
    for (int a = 0; a < 2; ++a) {  // the block's two 32-input activation blocks
      __m512i sum[T], weight_sum = _mm512_setzero_si512();  // per row: sum of w (x + 128), and of w
      __m512i kept8[kQ4Unsigned ? T : 1];                    // kQ4Unsigned: per row, 8 x the kept activations' sum
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      KESTREL_UNROLL
      for (auto& k8 : kept8) k8 = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {  // pairs of groups
        const __m512i ctrl = controls(meta, a, p);
        if constexpr (kQ4Unsigned) {
          const __m512i codes = s24_q4_codes(blk, a, p);
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            const __m512i xg = _mm512_shuffle_epi8(activations8(xq, t, nb, b, a, p), ctrl);  // signed activations
            sum[t] = _mm512_dpbusd_epi32(sum[t], codes, xg);
            kept8[t] = _mm512_dpbusd_epi32(kept8[t], eight, xg);
          }
        } else {
          const __m512i wv = s24_signed_codes<kQ8>(blk, a, p);
          weight_sum = _mm512_dpbusd_epi32(weight_sum, ones, wv);
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            const __m512i x8u = _mm512_xor_si512(activations8(xq, t, nb, b, a, p), to_unsigned);
            sum[t] = _mm512_dpbusd_epi32(sum[t], _mm512_shuffle_epi8(x8u, ctrl), wv);
          }
        }
      }
      if constexpr (kQ4Unsigned) {
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) sum[t] = _mm512_sub_epi32(sum[t], kept8[t]);  // sum of (q - 8) x
      }
      add_s24_block_sums<T>(sum, _mm512_slli_epi32(weight_sum, 7), d, xq, nb, b, a, acc);
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

// Many tokens: group g of a 2:4 layout in the wide layout (packed_sparse24.h) at out, so that the token
// tiles (tile_s24_wide) only load, shuffle and multiply; the controls and weight sums as tile_s24 makes them
// (the same wide layout whichever Controls made it).
template <PackedLayout L, class Controls>
void prepare_s24_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) {
  constexpr bool kQ8 = sparse24_q8_values(L);
  const Controls controls;
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < w.n_blocks; ++b) {
    const uint8_t* blk = w.data + static_cast<size_t>(g * w.n_blocks + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, static_cast<size_t>(b), kPrefetchBlocks, static_cast<size_t>(w.n_blocks), w.block_bytes, after), w.block_bytes);
    uint8_t* dst = out + static_cast<size_t>(b) * kSparse24WideBlockBytes;
    _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
    const uint8_t* meta = blk + sparse24_meta_offset(L);
    for (int a = 0; a < 2; ++a) {
      __m512i weight_sum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const int v = 4 * a + p;
        const __m512i ctrl = controls(meta, a, p), wv = s24_signed_codes<kQ8>(blk, a, p);
        weight_sum = _mm512_dpbusd_epi32(weight_sum, ones, wv);
        _mm512_storeu_si512(dst + kSparse24WidePairs + kSparse24WidePairBytes * v, wv);
        _mm512_storeu_si512(dst + kSparse24WidePairs + kSparse24WidePairBytes * v + 64, ctrl);
      }
      _mm512_storeu_si512(dst + kSparse24WideOffsets + 64 * a, _mm512_slli_epi32(weight_sum, 7));
    }
  }
}

// T tokens through a group prepared by prepare_s24_wide: per pair of groups and token, one broadcast made
// unsigned (x ^ 0x80 = x + 128, as in tile_s24), one shuffle and one dpbusd, where the dense tiles spend two
// dpbusd on the same 8 inputs; 128 x the kept codes' sums comes off per activation block.
template <int T>
void tile_s24_wide(const PackedView& w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g) {
  const __m512i to_unsigned = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * kSparse24WideBlockBytes;
    const __m512 d = _mm512_loadu_ps(blk);
    for (int a = 0; a < 2; ++a) {
      __m512i sum[T];
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const int v = 4 * a + p;
        const uint8_t* pair = blk + kSparse24WidePairs + kSparse24WidePairBytes * v;
        const __m512i wv = _mm512_loadu_si512(pair), ctrl = _mm512_loadu_si512(pair + 64);
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) {
          sum[t] = _mm512_dpbusd_epi32(sum[t], _mm512_shuffle_epi8(_mm512_xor_si512(activations8(xq, t, nb, b, a, p), to_unsigned), ctrl), wv);
        }
      }
      add_s24_block_sums<T>(sum, _mm512_loadu_si512(blk + kSparse24WideOffsets + 64 * a), d, xq, nb, b, a, acc);
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
}

// The 2:4 layouts' tiles for the shared driver (gemm_driver.h's sparse24_gemm): the direct tiles up to 16
// tokens (from memory they beat preparing at 12-16), the wide ones in tiles of 12 beyond (measured against
// 8 and 16).
template <class Controls>
struct Avx512Sparse24Tiles : Avx512TileShape {
  static constexpr int kSparseDirectTokens = 16;
  static constexpr int kWideTokens = 12;
  template <PackedLayout L, int T>
  static void tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
    tile_s24<L, T, Controls>(w, xq, nb, y, ys, g, after);
  }
  template <PackedLayout L>
  static void prepare_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) {
    prepare_s24_wide<L, Controls>(w, g, after, out);
  }
  template <PackedLayout, int T>
  static void tile_wide(const PackedView& w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g) {
    tile_s24_wide<T>(w, xq, nb, y, ys, g);
  }
};

}  // namespace
}  // namespace kestrel
