// Integer GEMM on 16-row packed weights with AVX2 (no VNNI): each 16-row group is done as two 8-row
// halves (lanes = rows; a half is the first or second 32 bytes of every 64-byte vector of the layout, so
// the second half reads the lines the first brought into cache). u8 x s8 products go through maddubs;
// the int16 pair sums of a block's 4-bit inputs cannot overflow (8 x 2 x 15 x 127 < 2^15), so they add
// up in int16 and widen once per block with madd. Q8_0 uses |w| and sign-adjusted activations so maddubs
// cannot saturate. Compiled with AVX2 flags; internal linkage throughout.
#include <immintrin.h>

#include <cstring>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr size_t kPrefetchBlocks = 6;         // how far ahead weights are prefetched (several tokens)
constexpr size_t kPrefetchBlocksDecode = 12;  // ... and for one token, whose blocks go by faster
constexpr size_t kPrefetchSuperBlocks = 2;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i widen_pairs(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }
// int16 sums of adjacent u8 x s8 products (x: 4 inputs broadcast to every row's lane).
inline __m256i maddubs(__m256i u, int32_t x4) { return _mm256_maddubs_epi16(u, _mm256_set1_epi32(x4)); }
inline __m256 load_8_halves(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 u8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Puts one token's 8 row results at y: written, or added to what is there (PackedView::accumulate).
inline void store_rows(const PackedView& w, float* y, __m256 rows) {
  _mm256_storeu_ps(y, w.accumulate ? _mm256_add_ps(_mm256_loadu_ps(y), rows) : rows);
}

// The half's 8 rows of one 32-input crumb tile: q[k] = inputs 4k..4k+3, 2 bits.
inline void load_crumb_tile(const uint8_t* tile, int half, __m256i (&q)[8]) {
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i v0 = load256(tile + 32 * half), v1 = load256(tile + 64 + 32 * half);
  for (int c = 0; c < 4; ++c) {
    q[c] = _mm256_and_si256(_mm256_srli_epi16(v0, 2 * c), m2);
    q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v1, 2 * c), m2);
  }
}
// The half's 8 rows of one 32-input triad tile (3-bit codes): q[k] = inputs 4k..4k+3; groups 0..5 lie whole
// in the tile's three vectors, groups 6 and 7 join two top bits of the first two with a bit of the third.
inline void load_triad_tile(const uint8_t* tile, int half, __m256i (&q)[8]) {
  const __m256i low3 = _mm256_set1_epi8(7), low2 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
  __m256i v[3];
  KESTREL_UNROLL
  for (int i = 0; i < 3; ++i) {
    v[i] = load256(tile + 64 * i + 32 * half);
    q[2 * i] = _mm256_and_si256(v[i], low3);
    q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v[i], 3), low3);
  }
  q[6] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[0], 6), low2), _mm256_and_si256(_mm256_srli_epi16(v[2], 5), bit2));
  q[7] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[1], 6), low2), _mm256_and_si256(_mm256_srli_epi16(v[2], 4), bit2));
}

// int16 pair sums per row lane over the two 16-input halves of a 32-input block (k-groups 0..3 and 4..7)
// of codes below 8 (4 x 2 x 7 x 127 < 2^15), for a madd to widen and scale per half.
inline void pair_sums_halves(const __m256i (&q)[8], const int32_t* x4, __m256i& lo, __m256i& hi) {
  lo = maddubs(q[0], x4[0]);
  hi = maddubs(q[4], x4[4]);
  for (int k = 1; k < 4; ++k) {
    lo = _mm256_add_epi16(lo, maddubs(q[k], x4[k]));
    hi = _mm256_add_epi16(hi, maddubs(q[k + 4], x4[k + 4]));
  }
}
// The 8 rows' bytes of two 16-input sub-blocks (a: the first's, b: the second's; 8 bytes each, one per row)
// as int16 pairs per 32-bit row lane: (a, b), sign- or zero-extended.
template <bool kSigned>
inline __m256i sub_block_pairs(const void* a, const void* b) {
  const __m128i interleaved = _mm_unpacklo_epi8(_mm_loadl_epi64(static_cast<const __m128i*>(a)), _mm_loadl_epi64(static_cast<const __m128i*>(b)));
  return kSigned ? _mm256_cvtepi8_epi16(interleaved) : _mm256_cvtepu8_epi16(interleaved);
}
// From int16 pairs (a, b) per 32-bit lane: (a, a), or with kSecond (b, b).
template <bool kSecond>
inline __m256i pair_twice(__m256i pairs) {
  constexpr char o = kSecond ? 2 : 0;
  return _mm256_shuffle_epi8(pairs, _mm256_setr_epi8(o, o + 1, o, o + 1, o + 4, o + 5, o + 4, o + 5, o + 8, o + 9, o + 8, o + 9, o + 12, o + 13, o + 12, o + 13,
                                                     o, o + 1, o, o + 1, o + 4, o + 5, o + 4, o + 5, o + 8, o + 9, o + 8, o + 9, o + 12, o + 13, o + 12, o + 13));
}
// Token x's two 16-input activation sums as the int16 pair of every 32-bit lane.
inline __m256i activation_half_sums(const BlockQ8A& x) {
  int32_t sums;
  std::memcpy(&sums, x.sum16, 4);
  return _mm256_set1_epi32(sums);
}

// The half's 8 rows of one 32-input nibble tile: q[k] = inputs 4k..4k+3.
inline void load_nibble_tile(const uint8_t* tile, int half, __m256i (&q)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (int k = 0; k < 4; ++k) {
    const __m256i packed = load256(tile + 64 * k + 32 * half);
    q[k] = _mm256_and_si256(packed, m4);
    q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), m4);
  }
}
// The half's 8 rows of one 32-input quint tile (5-bit codes): q[k] = inputs 4k..4k+3; groups 4..7 join the
// top three bits kept above groups 0..3 with the low two from the tile's fifth vector.
inline void load_quint_tile(const uint8_t* tile, int half, __m256i (&q)[8]) {
  const __m256i low5 = _mm256_set1_epi8(0x1F), bits2to4 = _mm256_set1_epi8(0x1C), low2 = _mm256_set1_epi8(3);
  const __m256i low_pairs = load256(tile + 256 + 32 * half);
  KESTREL_UNROLL
  for (int k = 0; k < 4; ++k) {
    const __m256i packed = load256(tile + 64 * k + 32 * half);
    q[k] = _mm256_and_si256(packed, low5);
    q[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 3), bits2to4),
                               _mm256_and_si256(k == 0 ? low_pairs : _mm256_srli_epi16(low_pairs, 2 * k), low2));
  }
}

// The half's 8 rows of one 32-input sextet tile (6-bit codes): q[k] = inputs 4k..4k+3; groups 4..7 join the
// top two bits kept above groups 0..3 with the nibbles of the tile's fifth and sixth vectors.
inline void load_sextet_tile(const uint8_t* tile, int half, __m256i (&q)[8]) {
  const __m256i low6 = _mm256_set1_epi8(0x3F), bits4to5 = _mm256_set1_epi8(0x30), low4 = _mm256_set1_epi8(0xF);
  const __m256i nibbles[2] = {load256(tile + 256 + 32 * half), load256(tile + 320 + 32 * half)};
  KESTREL_UNROLL
  for (int k = 0; k < 4; ++k) {
    const __m256i packed = load256(tile + 64 * k + 32 * half);
    q[k] = _mm256_and_si256(packed, low6);
    const __m256i low = k % 2 ? _mm256_srli_epi16(nibbles[k / 2], 4) : nibbles[k / 2];
    q[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 2), bits4to5), _mm256_and_si256(low, low4));
  }
}
// int32 sums per row lane of q[k] . x4[k] over the 8 k-groups of unsigned codes below 2^kBits. 4-bit codes
// add up in int16 (8 x 2 x 15 x 127 < 2^15) and widen once; 5-bit codes widen per four k-groups
// (4 x 2 x 31 x 127 < 2^15).
template <int kBits>
inline __m256i dot_codes(const __m256i (&q)[8], const int32_t* x4) {
  if constexpr (kBits == 4) {
    __m256i s16 = maddubs(q[0], x4[0]);
    for (int k = 1; k < 8; ++k) s16 = _mm256_add_epi16(s16, maddubs(q[k], x4[k]));
    return widen_pairs(s16);
  } else {
    __m256i lo = maddubs(q[0], x4[0]), hi = maddubs(q[4], x4[4]);
    for (int k = 1; k < 4; ++k) {
      lo = _mm256_add_epi16(lo, maddubs(q[k], x4[k]));
      hi = _mm256_add_epi16(hi, maddubs(q[k + 4], x4[k + 4]));
    }
    return _mm256_add_epi32(widen_pairs(lo), widen_pairs(hi));
  }
}

// acc[t] += the products of one 32-input block of the 32-input layout L (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1) for
// the half's 8 rows with token t's activation block xq[t * x_stride + b]: q[k] the codes of inputs 4k..4k+3
// (Q8_0: signed; the others: u8 codes kOffset above the weight's), d (and m) the rows' scales (and mins).
template <PackedLayout L, int T>
inline void add_half_block_products(const __m256i (&q)[8], __m256 d, __m256 m, const BlockQ8A* xq, size_t x_stride, size_t b,
                                    __m256 (&acc)[T]) {
  constexpr bool kFiveBit = L == PackedLayout::Q5_0x16 || L == PackedLayout::Q5_1x16;
  constexpr bool kMin = L == PackedLayout::Q4_1x16 || L == PackedLayout::Q5_1x16;
  constexpr int kOffset = L == PackedLayout::Q4_0x16 ? 8 : L == PackedLayout::Q5_0x16 ? 16 : 0;  // of the nibble codes
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) {
    const BlockQ8A& xb = xq[static_cast<size_t>(t) * x_stride + b];
    const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
    __m256i s;
    if constexpr (L == PackedLayout::Q8_0x16) {
      s = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i x = _mm256_set1_epi32(x4[k]);
        s = _mm256_add_epi32(s, widen_pairs(_mm256_maddubs_epi16(_mm256_sign_epi8(q[k], q[k]), _mm256_sign_epi8(x, q[k]))));
      }
    } else {
      s = dot_codes<kFiveBit ? 5 : 4>(q, x4);
      if constexpr (kOffset != 0) s = _mm256_add_epi32(s, _mm256_set1_epi32(-kOffset * xb.sum()));
    }
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
    if constexpr (kMin) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xb.d * static_cast<float>(xb.sum())), acc[t]);
  }
}

// The 32-input layouts (Q4_0, Q8_0, Q4_1, Q5_0, Q5_1), rows [8 * half, 8 * half + 8) of group g against T tokens.
template <PackedLayout L, int T>
void half_tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  constexpr bool kFiveBit = L == PackedLayout::Q5_0x16 || L == PackedLayout::Q5_1x16;
  constexpr bool kMin = L == PackedLayout::Q4_1x16 || L == PackedLayout::Q5_1x16;  // fp16 m[16] after d[16]
  constexpr size_t kTile = kMin ? 64 : 32;  // where the codes start
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, T > 1 ? kPrefetchBlocks : kPrefetchBlocksDecode, nb, w.block_bytes, after);
    prefetch_block_part(ahead.block, w.block_bytes, ahead.half, 2);
    const __m256 d = load_8_halves(blk + 16 * half);
    __m256 m = _mm256_setzero_ps();
    if constexpr (kMin) m = load_8_halves(blk + 32 + 16 * half);
    __m256i q[8];  // inputs 4k..4k+3 of the 8 rows: u8 codes, or signed (Q8_0)
    if constexpr (L == PackedLayout::Q8_0x16) {
      for (int k = 0; k < 8; ++k) q[k] = _mm256_xor_si256(load256(blk + 32 + 64 * k + 32 * half), flip);
    } else if constexpr (kFiveBit) {
      load_quint_tile(blk + kTile, half, q);
    } else {
      load_nibble_tile(blk + kTile, half, q);
    }
    add_half_block_products<L, T>(q, d, m, xq, nb, b, acc);
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// acc[t] += the 2:4 tiles' integer sums of activation block a of weight block b for token t, as floats: Q8's
// sums as they are, Q4's int16 pairs widened less offset_terms (128 x the rows' kept-code sums), times the
// rows' scales d and the block's activation scale.
template <bool kQ8, int T>
inline void add_s24_block_sums(const __m256i (&sum)[T], __m256i offset_terms, __m256 d, const BlockQ8A* xq, size_t nb, size_t b,
                               int a, __m256 (&acc)[T]) {
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) {
    const float dx = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].d;
    const __m256i s32 = kQ8 ? sum[t] : _mm256_sub_epi32(widen_pairs(sum[t]), offset_terms);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[t]);
  }
}

// The byte-shuffle controls of the 2:4 integer layouts (packed_sparse24.h) for the half's 8 rows: one
// shuffle, two shifts (one for activation block 1), an or, an and and an or per pair of groups.
struct Avx2Sparse24Controls {
  const __m256i spread[2] = {_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSparse24Spread[0].data()))),
                             _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kSparse24Spread[1].data())))};
  const __m256i three = _mm256_set1_epi8(3), offsets = _mm256_set1_epi32(static_cast<int>(kSparse24ControlOffsets));
  // Pair p of activation block a; meta: the block's positions.
  __m256i operator()(const uint8_t* meta, int half, int a, int p) const {
    __m256i rows = load256(meta + 64 * (p / 2) + 32 * half);  // [8 rows] dword p / 2
    if (a == 1) rows = _mm256_srli_epi16(rows, 4);
    const __m256i s = _mm256_shuffle_epi8(rows, spread[p % 2]);
    return _mm256_or_si256(_mm256_and_si256(_mm256_or_si256(s, _mm256_slli_epi16(s, 6)), three), offsets);
  }
};

// The 2:4 layouts S24_Q8x16 and S24_Q4x16 for the half's 8 rows, a few tokens (see the AVX-512 kernel): per
// pair of 4-input groups one byte shuffle gathers the activations at each row's 4 kept inputs, and maddubs
// multiplies them with the 4 kept weights. Q8: |w| and sign-adjusted activations, so nothing saturates;
// Q4: activations made unsigned as they are broadcast (x ^ 0x80 = x + 128; |w| <= 8 keeps maddubs' pairs in
// range) and 128 x the weight sums, taken once for all tokens, off at the end of each activation block.
//
// S24_Q4 with up to kQ4UnsignedTokens tokens: the codes q (0..15) as maddubs' unsigned operand and the
// shuffled activations as they are, (q - 8) x = maddubs(q, x) - maddubs(8, x): no signed codes, weight sum
// or activation flip (beyond, the weight-sum scheme shares its weight work among the tokens).
constexpr int kQ4UnsignedTokens = 2;
template <PackedLayout L, int T>
void half_tile_s24(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  constexpr bool kQ8 = L == PackedLayout::S24_Q8x16;
  constexpr bool kQ4Unsigned = !kQ8 && T <= kQ4UnsignedTokens;  // weight_sum stays 0
  const Avx2Sparse24Controls controls;
  const __m256i low4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi8(1);
  const __m256i to_unsigned = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, T > 1 ? kPrefetchBlocks : kPrefetchBlocksDecode, nb, w.block_bytes, after);
    prefetch_block_part(ahead.block, w.block_bytes, ahead.half, 2);
    const __m256 d = load_8_halves(blk + 16 * half);
    const uint8_t* meta = blk + sparse24_meta_offset(L);
    for (int a = 0; a < 2; ++a) {  // the block's two 32-input activation blocks
      // per row: int32 sums (Q8), or int16 pairs (Q4: 4 x 2 x 255 x 8 < 2^15) and the weights' int16 pair sums
      __m256i sum[T], weight_sum = _mm256_setzero_si256();
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {  // pairs of groups
        const int v = 4 * a + p;
        const __m256i ctrl = controls(meta, half, a, p);
        if constexpr (kQ8) {
          const __m256i wv = load256(blk + 32 + 64 * v + 32 * half);  // [8 rows][4] signed
          const __m256i magnitude = _mm256_sign_epi8(wv, wv);
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            const BlockQ8A& xb = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)];
            long long x8;
            std::memcpy(&x8, xb.qs + 8 * p, 8);
            const __m256i xg = _mm256_shuffle_epi8(_mm256_set1_epi64x(x8), ctrl);
            sum[t] = _mm256_add_epi32(sum[t], widen_pairs(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xg, wv))));
          }
        } else if constexpr (kQ4Unsigned) {
          const __m256i packed = load256(blk + 32 + 64 * p + 32 * half);
          const __m256i codes = _mm256_and_si256(a == 0 ? packed : _mm256_srli_epi16(packed, 4), low4);  // [8 rows][4] q, 0..15
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            long long x8;
            std::memcpy(&x8, xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p, 8);
            const __m256i xg = _mm256_shuffle_epi8(_mm256_set1_epi64x(x8), ctrl);  // signed activations
            // (q - 8) x in int16 pairs: each maddubs under 2 x 15 x 128, the difference at most 2 x 8 x 128, 4 pairs < 2^15
            sum[t] = _mm256_add_epi16(sum[t], _mm256_sub_epi16(_mm256_maddubs_epi16(codes, xg), _mm256_maddubs_epi16(eight, xg)));
          }
        } else {
          const __m256i packed = load256(blk + 32 + 64 * p + 32 * half);
          const __m256i wv = _mm256_sub_epi8(_mm256_and_si256(a == 0 ? packed : _mm256_srli_epi16(packed, 4), low4), eight);
          weight_sum = _mm256_add_epi16(weight_sum, _mm256_maddubs_epi16(ones, wv));
          KESTREL_UNROLL
          for (int t = 0; t < T; ++t) {
            const BlockQ8A& xb = xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)];
            long long x8;
            std::memcpy(&x8, xb.qs + 8 * p, 8);
            const __m256i x8u = _mm256_xor_si256(_mm256_set1_epi64x(x8), to_unsigned);
            sum[t] = _mm256_add_epi16(sum[t], _mm256_maddubs_epi16(_mm256_shuffle_epi8(x8u, ctrl), wv));
          }
        }
      }
      add_s24_block_sums<kQ8, T>(sum, _mm256_slli_epi32(widen_pairs(weight_sum), 7), d, xq, nb, b, a, acc);  // Q4: 128 x sum of w
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// Many tokens: group g of a 2:4 layout in the wide layout (packed_sparse24.h) at out, 8 rows at a time.
template <PackedLayout L>
void prepare_s24_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) {
  constexpr bool kQ8 = L == PackedLayout::S24_Q8x16;
  const Avx2Sparse24Controls controls;
  const __m256i low4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi8(1);
  const size_t nb = static_cast<size_t>(w.n_blocks);
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    uint8_t* dst = out + b * kSparse24WideBlockBytes;
    for (int half = 0; half < 2; ++half) {
      _mm256_storeu_ps(reinterpret_cast<float*>(dst) + 8 * half, load_8_halves(blk + 16 * half));
      const uint8_t* meta = blk + sparse24_meta_offset(L);
      for (int a = 0; a < 2; ++a) {
        __m256i weight_sum = _mm256_setzero_si256();  // int16 pairs
        for (int p = 0; p < 4; ++p) {
          const int v = 4 * a + p;
          const __m256i ctrl = controls(meta, half, a, p);
          __m256i wv;  // [8 rows][4] signed kept codes
          if constexpr (kQ8) {
            wv = load256(blk + 32 + 64 * v + 32 * half);
          } else {
            const __m256i packed = load256(blk + 32 + 64 * p + 32 * half);
            wv = _mm256_sub_epi8(_mm256_and_si256(a == 0 ? packed : _mm256_srli_epi16(packed, 4), low4), eight);
          }
          weight_sum = _mm256_add_epi16(weight_sum, _mm256_maddubs_epi16(ones, wv));  // |pairs| <= 8 x 254
          uint8_t* pair = dst + kSparse24WidePairs + kSparse24WidePairBytes * v + 32 * half;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(pair), wv);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(pair + 64), ctrl);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kSparse24WideOffsets + 64 * a + 32 * half),
                            _mm256_slli_epi32(widen_pairs(weight_sum), 7));
      }
    }
  }
}

// T tokens through the half's 8 rows of a group prepared by prepare_s24_wide: per pair of groups and token
// one shuffle gathers the activations of 4 of its 8 inputs (the dense tiles multiply all 8). Q4: the
// activations made unsigned as they are broadcast (x ^ 0x80 = x + 128; |w| <= 8 keeps maddubs' pairs in
// range) and 128 x the kept codes' sums off per block; Q8: |w| times sign-adjusted activations, so nothing
// saturates.
template <PackedLayout L, int T>
void half_tile_s24_wide(const PackedView& w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half) {
  constexpr bool kQ8 = L == PackedLayout::S24_Q8x16;
  const __m256i to_unsigned = _mm256_set1_epi8(static_cast<char>(0x80));  // Q4
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * kSparse24WideBlockBytes;
    const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(blk) + 8 * half);
    for (int a = 0; a < 2; ++a) {
      __m256i sum[T];  // per row: int32 sums (Q8), int16 pairs (Q4: 4 x 2 x 255 x 8 < 2^15)
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const int v = 4 * a + p;
        const uint8_t* pair = blk + kSparse24WidePairs + kSparse24WidePairBytes * v + 32 * half;
        const __m256i wv = load256(pair), ctrl = load256(pair + 64);
        const __m256i magnitude = kQ8 ? _mm256_sign_epi8(wv, wv) : wv;
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) {
          long long x8;
          std::memcpy(&x8, xq[static_cast<size_t>(t) * 2 * nb + 2 * b + static_cast<size_t>(a)].qs + 8 * p, 8);
          const __m256i x8v = _mm256_set1_epi64x(x8);
          const __m256i xg = _mm256_shuffle_epi8(kQ8 ? x8v : _mm256_xor_si256(x8v, to_unsigned), ctrl);
          if constexpr (kQ8)
            sum[t] = _mm256_add_epi32(sum[t], widen_pairs(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xg, wv))));
          else
            sum[t] = _mm256_add_epi16(sum[t], _mm256_maddubs_epi16(xg, wv));
        }
      }
      add_s24_block_sums<kQ8, T>(sum, load256(blk + kSparse24WideOffsets + 64 * a + 32 * half), d, xq, nb, b, a, acc);
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// The 8 sub-blocks' scales and mins of the half's 8 rows, out[0][j] and out[1][j], from the packed 6-bit
// codes (scales[k][16]: byte k of each row's 12, as in the file; see the AVX-512 kernel for the format).
inline void q4_k_scales_mins_x8(const uint8_t* scales, int half, uint8_t (*out)[8][8]) {
  const auto bytes4 = [&](int k) {  // bytes k..k+3 of the 8 rows: byte (k' - k, row)
    const auto* p = reinterpret_cast<const long long*>(scales + 8 * half);
    return _mm256_set_epi64x(p[2 * (k + 3)], p[2 * (k + 2)], p[2 * (k + 1)], p[2 * k]);
  };
  const __m256i codes0 = bytes4(0), codes1 = bytes4(4), codes2 = bytes4(8);
  const __m256i low6 = _mm256_set1_epi8(63), low4 = _mm256_set1_epi8(0xF), low2 = _mm256_set1_epi8(3);
  const auto top2 = [&](__m256i x) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(x, 6), low2), 4); };
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[0][0]), _mm256_and_si256(codes0, low6));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[1][0]), _mm256_and_si256(codes1, low6));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[0][4]), _mm256_or_si256(_mm256_and_si256(codes2, low4), top2(codes0)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[1][4]),
                      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(codes2, 4), low4), top2(codes1)));
}

// K-quant tiles: one block is a 256-input super-block, eight 32-input activation blocks. Q4_K, and Q5_K
// (the same head, then a quint tile per sub-block).
template <PackedLayout L, int T>
void half_tile_q4_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  constexpr bool kFiveBit = L == PackedLayout::Q5_Kx16;
  const size_t nxb = nb * 8;  // activation blocks per token
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    alignas(32) uint8_t scales_mins[2][8][8];  // [scale | min][sub-block][row]
    q4_k_scales_mins_x8(blk + 64, half, scales_mins);
    const __m256 d = load_8_halves(blk + 16 * half), dmin = load_8_halves(blk + 32 + 16 * half);
    for (int j = 0; j < 8; ++j) {
      prefetch_block_part(ahead.block, w.block_bytes, 8 * ahead.half + j, 16);
      const __m256 scale = _mm256_mul_ps(d, u8x8_to_ps(scales_mins[0][j]));
      const __m256 min = _mm256_mul_ps(dmin, u8x8_to_ps(scales_mins[1][j]));
      __m256i q[8];
      if constexpr (kFiveBit) {
        load_quint_tile(blk + 256 + 320 * j, half, q);
      } else {
        load_nibble_tile(blk + 256 + 256 * j, half, q);
      }
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
        const __m256i s = dot_codes<kFiveBit ? 5 : 4>(q, x4);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(scale, _mm256_set1_ps(xb.d)), acc[t]);
        acc[t] = _mm256_fnmadd_ps(min, _mm256_set1_ps(xb.d * static_cast<float>(xb.sum())), acc[t]);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// Q2_K: per 16-input sub-block, w = d * sc * q - dmin * m with q in 0..3 and the 4-bit sc, m of one byte.
// The sub-block scales multiply the int16 pair sums in the madd that widens them, the mins meet the
// activations' half sums in one madd, and d and dmin scale each super-block's sums once per token.
template <int T>
void half_tile_q2_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  const size_t nxb = nb * 8;
  const __m256i low4 = _mm256_set1_epi16(0xF);
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    __m256 sb[T], sb_min[T];  // the super-block's sums times the activation scales, before d and dmin
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = sb_min[t] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      prefetch_block_part(ahead.block, w.block_bytes, 8 * ahead.half + j, 16);
      // int16 pairs per row: (sc, sc) of each sub-block, and (m of sub-block 2j, m of 2j + 1)
      const __m256i bytes = sub_block_pairs<false>(blk + 64 + 32 * j + 8 * half, blk + 80 + 32 * j + 8 * half);
      const __m256i scales = _mm256_and_si256(bytes, low4);
      const __m256i sc0 = pair_twice<false>(scales), sc1 = pair_twice<true>(scales);
      const __m256i mins = _mm256_srli_epi16(bytes, 4);
      __m256i q[8];
      load_crumb_tile(blk + 320 + 128 * j, half, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        __m256i lo, hi;
        pair_sums_halves(q, reinterpret_cast<const int32_t*>(xb.qs), lo, hi);
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(lo, sc0), _mm256_madd_epi16(hi, sc1));
        const __m256i m = _mm256_madd_epi16(mins, activation_half_sums(xb));
        const __m256 dx = _mm256_set1_ps(xb.d);
        sb[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dx, sb[t]);
        sb_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dx, sb_min[t]);
      }
    }
    const __m256 d = load_8_halves(blk + 16 * half), dmin = load_8_halves(blk + 32 + 16 * half);
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(d, sb[t], _mm256_fnmadd_ps(dmin, sb_min[t], acc[t]));
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// The 16 sub-blocks' scales (6-bit code - 32) of the half's 8 rows, out[j][row], from the packed codes
// (scales[12][16]: byte k of each row's 12, as in the file; see the AVX-512 kernel).
inline void q3_k_scales_x8(const uint8_t* scales, int half, int8_t (*out)[8]) {
  const auto bytes4 = [&](int k) {  // bytes k..k+3 of the 8 rows: byte (k' - k, row)
    const auto* p = reinterpret_cast<const long long*>(scales + 8 * half);
    return _mm256_set_epi64x(p[2 * (k + 3)], p[2 * (k + 2)], p[2 * (k + 1)], p[2 * k]);
  };
  const __m256i a = bytes4(0), b = bytes4(4), c = bytes4(8);
  const __m256i low4 = _mm256_set1_epi8(0xF), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  const auto top2 = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(c, shift), low2), 4); };
  const auto store = [&](int j, __m256i low) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[j]), _mm256_sub_epi8(_mm256_or_si256(low, top2(j / 2)), bias));
  };
  store(0, _mm256_and_si256(a, low4));
  store(4, _mm256_and_si256(b, low4));
  store(8, _mm256_and_si256(_mm256_srli_epi16(a, 4), low4));
  store(12, _mm256_and_si256(_mm256_srli_epi16(b, 4), low4));
}

// Q3_K: per 16-input sub-block, w = d * sc * (q - 4) with q in 0..7. As Q2_K, the scales multiply in the
// widening madd, and -4 sc (the codes' offset) meets the activations' half sums in one madd.
template <int T>
void half_tile_q3_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  const size_t nxb = nb * 8;
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    alignas(32) int8_t scales[16][8];  // [sub-block][row]
    q3_k_scales_x8(blk + 32, half, scales);
    __m256 sb[T];  // the super-block's sums times the activation scales, before d
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) sb[t] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      prefetch_block_part(ahead.block, w.block_bytes, 8 * ahead.half + j, 16);
      // int16 pairs per row: (sc, sc) of each sub-block, and -4 x (sc of sub-block 2j, sc of 2j + 1)
      const __m256i both = sub_block_pairs<true>(scales[2 * j], scales[2 * j + 1]);
      const __m256i sc0 = pair_twice<false>(both), sc1 = pair_twice<true>(both);
      const __m256i offsets = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(both, 2));
      __m256i q[8];
      load_triad_tile(blk + 224 + 192 * j, half, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        __m256i lo, hi;
        pair_sums_halves(q, reinterpret_cast<const int32_t*>(xb.qs), lo, hi);
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo, sc0), _mm256_madd_epi16(hi, sc1)),
                                           _mm256_madd_epi16(offsets, activation_half_sums(xb)));
        sb[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(xb.d), sb[t]);
      }
    }
    const __m256 d = load_8_halves(blk + 16 * half);
    KESTREL_UNROLL
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(d, sb[t], acc[t]);
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// Q6_K: 6-bit q in 0..63 (two int16 pair sums per lane at most: 2 x 2 x 63 x 127 < 2^15), w = d sc (q - 32).
template <int T>
void half_tile_q6_k(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half, const uint8_t* after) {
  const size_t nxb = nb * 8;
  __m256 acc[T];
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    const StreamHalf ahead = two_pass_ahead(group, half, b, kPrefetchSuperBlocks, nb, w.block_bytes, after);
    const __m256 d = load_8_halves(blk + 16 * half);
    for (int j = 0; j < 8; ++j) {
      prefetch_block_part(ahead.block, w.block_bytes, 8 * ahead.half + j, 16);
      const __m256 sc0 = _mm256_mul_ps(d, i8x8_to_ps(blk + 32 + 32 * j + 8 * half));  // inputs 0..15
      const __m256 sc1 = _mm256_mul_ps(d, i8x8_to_ps(blk + 48 + 32 * j + 8 * half));  // inputs 16..31
      __m256i q[8];
      load_sextet_tile(blk + 288 + 384 * j, half, q);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + b * 8 + j];
        const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
        const auto pair = [&](int k) { return widen_pairs(_mm256_add_epi16(maddubs(q[k], x4[k]), maddubs(q[k + 1], x4[k + 1]))); };
        const __m256i s0 = _mm256_add_epi32(_mm256_add_epi32(pair(0), pair(2)), _mm256_set1_epi32(-32 * xb.sum16[0]));
        const __m256i s1 = _mm256_add_epi32(_mm256_add_epi32(pair(4), pair(6)), _mm256_set1_epi32(-32 * xb.sum16[1]));
        const __m256 dx = _mm256_set1_ps(xb.d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(sc0, dx), acc[t]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(sc1, dx), acc[t]);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) store_rows(w, y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half, acc[t]);
}

// The tiles of each layout, for the shared driver (gemm_driver.h).
struct Avx2Tiles {
  static constexpr bool kSparse24Wide = true;
  static constexpr int kTokens = 4;  // tokens per register tile
  static constexpr int64_t kGroupChunk = 4;  // row groups whose weights stay in cache while token tiles pass
  template <PackedLayout L, int T>
  static void tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, const uint8_t* after) {
    for (int half = 0; half < 2; ++half) {  // rows 0..7, then 8..15
      if constexpr (L == PackedLayout::Q4_Kx16 || L == PackedLayout::Q5_Kx16)
        half_tile_q4_k<L, T>(w, xq, nb, y, ys, g, half, after);
      else if constexpr (L == PackedLayout::Q6_Kx16)
        half_tile_q6_k<T>(w, xq, nb, y, ys, g, half, after);
      else if constexpr (L == PackedLayout::Q2_Kx16)
        half_tile_q2_k<T>(w, xq, nb, y, ys, g, half, after);
      else if constexpr (L == PackedLayout::Q3_Kx16)
        half_tile_q3_k<T>(w, xq, nb, y, ys, g, half, after);
      else if constexpr (L == PackedLayout::S24_Q8x16 || L == PackedLayout::S24_Q4x16)
        half_tile_s24<L, T>(w, xq, nb, y, ys, g, half, after);
      else
        half_tile<L, T>(w, xq, nb, y, ys, g, half, after);
    }
  }
  // 2:4 layouts (gemm_driver.h's sparse24_gemm): the direct tiles up to 8 tokens, the wide ones beyond
  // (at 12 tokens they beat the direct ones, from memory too), in tiles of 4 (measured against 6).
  static constexpr int kSparseDirectTokens = 8;
  static constexpr int kWideTokens = 4;
  template <PackedLayout L>
  static void prepare_wide(const PackedView& w, int64_t g, const uint8_t* after, uint8_t* out) { prepare_s24_wide<L>(w, g, after, out); }
  template <PackedLayout L, int T>
  static void tile_wide(const PackedView& w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g) {
    for (int half = 0; half < 2; ++half) half_tile_s24_wide<L, T>(w, xq, nb, y, ys, g, half);
  }
};

}  // namespace

PackedGemmFn packed_gemm_kernel_avx2(PackedLayout layout) { return packed_gemm_table<Avx2Tiles>(layout); }

}  // namespace kestrel
