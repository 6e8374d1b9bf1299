// Integer GEMM on 16-row packed weights with AVX-512 VNNI: lanes are the 16 rows of a group, one
// vpdpbusd multiplies them by 4 inputs of one token, and a 32-input block is scaled once per token.
// Compiled with AVX-512 flags and only entered after run-time detection; internal linkage throughout.
#include <immintrin.h>

#include <cstring>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr size_t kPrefetchBlocks = 6;         // how far ahead weights are prefetched (several tokens)
constexpr size_t kPrefetchBlocksDecode = 16;  // ... and for one token, whose blocks go by faster
// ... and the 32-input layouts' small blocks at any token count: at 6 a verify forward of a few tokens
// (speculative decoding, 2-8 rows) waited on memory its compute could hide (TinyLlama Q4_0, 2 threads:
// pp4 / pp5 / pp8 +10-25% at 16, pp512 unchanged).
constexpr size_t kPrefetchBlocks32 = 16;
constexpr size_t kPrefetchSparseDecode = 20;  // ... the 2:4 layouts' blocks (672 or 416 bytes), one token

// Puts one token's 16 row results at y: written, or added to what is there (PackedView::accumulate).
inline void store_rows(const PackedView& w, float* y, __m512 rows) {
  _mm512_storeu_ps(y, w.accumulate ? _mm512_add_ps(_mm512_loadu_ps(y), rows) : rows);
}

// Adds the top bit of the codes to q[8] (inputs 4k..4k+3 of the 16 rows, the lower bits): where bit k of a
// byte of the high-bit plane is set, `top` (16 for 5-bit codes, 4 for 3-bit ones) is added to q[k]'s byte (a
// byte-masked add: two operations per k).
inline void add_high_bits(__m512i (&q)[8], __m512i plane, char top = 16) {
  const __m512i add = _mm512_set1_epi8(top);
  KESTREL_UNROLL
  for (int k = 0; k < 8; ++k) {
    const __mmask64 set = _mm512_test_epi8_mask(plane, _mm512_set1_epi8(static_cast<char>(1 << k)));
    q[k] = _mm512_mask_add_epi8(q[k], set, q[k], add);
  }
}

// The 16 rows' codes of one 32-input crumb tile: q[k] = inputs 4k..4k+3, 2 bits (plus bit 2 from `plane`
// when given).
inline void load_crumb_tile(const uint8_t* tile, const uint8_t* plane, __m512i (&q)[8]) {
  const __m512i m2 = _mm512_set1_epi8(3);
  const __m512i v0 = _mm512_loadu_si512(tile), v1 = _mm512_loadu_si512(tile + 64);
  for (int c = 0; c < 4; ++c) {
    q[c] = _mm512_and_si512(_mm512_srli_epi16(v0, 2 * c), m2);
    q[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v1, 2 * c), m2);
  }
  if (plane) add_high_bits(q, _mm512_loadu_si512(plane), 4);
}

// The 16 rows' codes of one 32-input nibble tile: q[k] = inputs 4k..4k+3 (plus bit 4 from `plane` when given).
inline void load_nibble_tile(const uint8_t* tile, const uint8_t* plane, __m512i (&q)[8]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
  for (int k = 0; k < 4; ++k) {
    const __m512i packed = _mm512_loadu_si512(tile + 64 * k);
    q[k] = _mm512_and_si512(packed, m4);
    q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), m4);
  }
  if (plane) add_high_bits(q, _mm512_loadu_si512(plane));
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
    } else {
      load_nibble_tile(blk + kTile, kFiveBit ? blk + kTile + 256 : nullptr, q);
    }
    add_block_products<L, T>(q, d, m, xq, nb, b, acc);
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16, acc[t]);
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

// The 2:4 layouts S24_Q8x16 and S24_Q4x16 (packed_matrix.h, packed_sparse24.h), a few tokens: per pair of
// 4-input groups, each row's masks pick a byte-shuffle control from two tables, one shuffle gathers the
// activations at the row's 4 kept inputs (of the pair's 8) next to its 4 kept signed weights, and one
// dpbusd multiplies them. The activations are made unsigned (x ^ 0x80 = x + 128 per byte) as they are
// broadcast, so 128 x the rows' weight sums, taken once for all tokens, comes off at the end of each
// activation block.
//
// S24_Q4 with up to 4 tokens: the codes q (0..15) are the unsigned operand and the shuffled activations the
// signed one, as they are: sum (q - 8) x = dpbusd(q, x) - dpbusd(8, x), two dpbusd per token where the
// weight-sum scheme spends the signed codes' subtraction, the weight sum and a flip per token (more tokens
// keep that scheme: two accumulators per token would not fit the registers).
template <PackedLayout L, int T>
void tile_s24(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  constexpr bool kQ8 = L == PackedLayout::S24_Q8x16;
  constexpr bool kQ4Unsigned = !kQ8 && T <= 4;
  const __m512i first = _mm512_loadu_si512(kSparse24Gather[0].data()), second = _mm512_loadu_si512(kSparse24Gather[1].data());
  const __m512i low4 = _mm512_set1_epi8(0xF), eight = _mm512_set1_epi8(8), ones = _mm512_set1_epi8(1);
  const __m512i to_unsigned = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * static_cast<size_t>(w.n_blocks) + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, T > 1 ? kPrefetchBlocks : kPrefetchSparseDecode, nb, w.block_bytes, after), w.block_bytes);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));  // [16] row scales
    const uint8_t* masks = blk + sparse24_masks_offset(L);
    for (int a = 0; a < 2; ++a) {  // the block's two 32-input activation blocks
      __m512i sum[T], weight_sum = _mm512_setzero_si512();  // per row: sum of w (x + 128), and of w
      __m512i kept8[kQ4Unsigned ? T : 1];                    // kQ4Unsigned: per row, 8 x the kept activations' sum
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      KESTREL_UNROLL
      for (auto& k8 : kept8) k8 = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {  // pairs of groups
        const int v = 4 * a + p;
        const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(masks + 16 * v)));
        const __m512i ctrl = _mm512_or_si512(_mm512_permutexvar_epi32(m, first), _mm512_permutexvar_epi32(_mm512_srli_epi32(m, 4), second));
        if constexpr (kQ4Unsigned) {
          const __m512i packed = _mm512_loadu_si512(blk + 32 + 64 * p);
          const __m512i codes = _mm512_and_si512(a == 0 ? packed : _mm512_srli_epi16(packed, 4), low4);  // [16 rows][4] q, 0..15
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            long long x8;
            std::memcpy(&x8, xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p, 8);
            const __m512i xg = _mm512_shuffle_epi8(_mm512_set1_epi64(x8), ctrl);  // signed activations
            sum[t] = _mm512_dpbusd_epi32(sum[t], codes, xg);
            kept8[t] = _mm512_dpbusd_epi32(kept8[t], eight, xg);
          }
          continue;
        }
        __m512i wv;  // [16 rows][4] signed weight codes
        if constexpr (kQ8) {
          wv = _mm512_loadu_si512(blk + 32 + 64 * v);
        } else {
          const __m512i packed = _mm512_loadu_si512(blk + 32 + 64 * p);
          wv = _mm512_sub_epi8(_mm512_and_si512(a == 0 ? packed : _mm512_srli_epi16(packed, 4), low4), eight);
        }
        weight_sum = _mm512_dpbusd_epi32(weight_sum, ones, wv);
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) {
          const BlockQ8A& xb = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)];
          long long x8;  // 8 activation codes, broadcast from memory
          std::memcpy(&x8, xb.qs + 8 * p, 8);
          const __m512i x8u = _mm512_xor_si512(_mm512_set1_epi64(x8), to_unsigned);
          sum[t] = _mm512_dpbusd_epi32(sum[t], _mm512_shuffle_epi8(x8u, ctrl), wv);
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
// tiles (tile_s24_wide) only load, shuffle and multiply; the controls and weight sums as tile_s24 makes them.
template <PackedLayout L>
void prepare_s24_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) {
  constexpr bool kQ8 = L == PackedLayout::S24_Q8x16;
  const __m512i first = _mm512_loadu_si512(kSparse24Gather[0].data()), second = _mm512_loadu_si512(kSparse24Gather[1].data());
  const __m512i low4 = _mm512_set1_epi8(0xF), eight = _mm512_set1_epi8(8), ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < w.n_blocks; ++b) {
    const uint8_t* blk = w.data + static_cast<size_t>(g * w.n_blocks + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, static_cast<size_t>(b), kPrefetchBlocks, static_cast<size_t>(w.n_blocks), w.block_bytes, after), w.block_bytes);
    uint8_t* dst = out + static_cast<size_t>(b) * kSparse24WideBlockBytes;
    _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
    const uint8_t* masks = blk + sparse24_masks_offset(L);
    for (int a = 0; a < 2; ++a) {
      __m512i weight_sum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const int v = 4 * a + p;
        const __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(masks + 16 * v)));
        const __m512i ctrl = _mm512_or_si512(_mm512_permutexvar_epi32(m, first), _mm512_permutexvar_epi32(_mm512_srli_epi32(m, 4), second));
        __m512i wv;
        if constexpr (kQ8) {
          wv = _mm512_loadu_si512(blk + 32 + 64 * v);
        } else {
          const __m512i packed = _mm512_loadu_si512(blk + 32 + 64 * p);
          wv = _mm512_sub_epi8(_mm512_and_si512(a == 0 ? packed : _mm512_srli_epi16(packed, 4), low4), eight);
        }
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
          long long x8;
          std::memcpy(&x8, xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p, 8);
          sum[t] = _mm512_dpbusd_epi32(sum[t], _mm512_shuffle_epi8(_mm512_xor_si512(_mm512_set1_epi64(x8), to_unsigned), ctrl), wv);
        }
      }
      add_s24_block_sums<T>(sum, _mm512_loadu_si512(blk + kSparse24WideOffsets + 64 * a), d, xq, nb, b, a, acc);
    }
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
// (the same bytes followed by a high-bit plane per sub-block).
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
      load_nibble_tile(blk + 256 + 256 * j, L == PackedLayout::Q5_Kx16 ? blk + 2304 + 64 * j : nullptr, q);
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

// Q2_K: per 16-input sub-block, w = d * sc * q - dmin * m with q in 0..3 and the 4-bit sc, m of one byte.
template <int T>
void tile_q2_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nxb = nb * 8;
  const __m512i low4 = _mm512_set1_epi32(0xF);
  __m512 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    __m512 sb[T], sb_min[T];  // the super-block's sums, scaled by d and dmin once at the end
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = sb_min[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      prefetch_superblock_part(ahead, w.block_bytes, j);
      const __m512i raw0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 64 + 32 * j)));
      const __m512i raw1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 80 + 32 * j)));
      const __m512 sc0 = _mm512_cvtepi32_ps(_mm512_and_si512(raw0, low4)), sc1 = _mm512_cvtepi32_ps(_mm512_and_si512(raw1, low4));
      const __m512 m0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(raw0, 4)), m1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(raw1, 4));
      __m512i q[8];
      load_crumb_tile(blk + 320 + 128 * j, nullptr, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        dot_halves(q, xb, s0, s1);
        const __m512 dx = _mm512_set1_ps(xb.d);
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(sc0, dx), sb[t]);
        sb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(sc1, dx), sb[t]);
        sb_min[t] = _mm512_fmadd_ps(m0, _mm512_set1_ps(xb.d * static_cast<float>(xb.sum16[0])), sb_min[t]);
        sb_min[t] = _mm512_fmadd_ps(m1, _mm512_set1_ps(xb.d * static_cast<float>(xb.sum16[1])), sb_min[t]);
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
      const uint8_t* tile = blk + 224 + 192 * j;
      load_crumb_tile(tile, tile + 128, q);
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
  const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(3);
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
      const __m512i hi0 = _mm512_loadu_si512(blk + 2336 + 128 * j), hi1 = _mm512_loadu_si512(blk + 2336 + 128 * j + 64);
      __m512i q[8];
      for (int k = 0; k < 4; ++k) {
        const __m512i packed = _mm512_loadu_si512(blk + 288 + 256 * j + 64 * k);
        q[k] = _mm512_and_si512(packed, m4);
        q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), m4);
      }
      for (int k = 0; k < 8; ++k) {  // k-group k: high bits in hi[k % 2] at bits 2 * (k / 2)
        const __m512i h = _mm512_and_si512(_mm512_srli_epi16(k % 2 ? hi1 : hi0, 2 * (k / 2)), m2);
        q[k] = _mm512_or_si512(q[k], _mm512_slli_epi16(h, 4));
      }
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
struct Avx512Tiles {
  static constexpr bool kAllLayouts = true;
  static constexpr int kTokens = 8;  // tokens per register tile
  static constexpr int64_t kGroupChunk = 4;  // row groups whose weights stay in cache while token tiles pass
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
      tile_s24<L, T>(w, xq, nb, y, ys, g, after);
    else
      tile_32<L, T>(w, xq, nb, y, ys, g, after);
  }
  // 2:4 layouts (gemm_driver.h's sparse24_gemm): the direct tiles up to 16 tokens (from memory they beat
  // preparing at 12-16), the wide ones in tiles of 12 beyond (measured against 8 and 16).
  static constexpr int kSparseDirectTokens = 16;
  static constexpr int kWideTokens = 12;
  template <PackedLayout L>
  static void prepare_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) { prepare_s24_wide<L>(w, g, after, out); }
  template <PackedLayout, int T>
  static void tile_wide(const PackedView& w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g) {
    tile_s24_wide<T>(w, xq, nb, y, ys, g);
  }
};

}  // namespace

PackedGemmFn packed_gemm_kernel_avx512(PackedLayout layout) { return packed_gemm_table<Avx512Tiles>(layout); }

}  // namespace kestrel
