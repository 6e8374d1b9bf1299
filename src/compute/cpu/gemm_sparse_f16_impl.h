// The 2:4 F16 layout's GEMM (S24_F16x16, compute/cpu/packed_sparse24.h), exact F16 weights against float
// activations however the tokens are batched. A few tokens (decode): per 4-input group each row's two kept
// weights meet the activations at their positions, picked from the group's 4 by an in-lane permute
// (sparse_f16_decode on an ISA's SparseF16 operations). More: groups expanded into the F16Fma16 layout,
// kFloatGroupChunk at a time as the dense GEMM widens them together, then the float GEMM of
// gemm_float_impl.h on vector type V (sparse_f16_prefill), or on AVX2, from kSparse24F16LaneTokens tokens,
// the kept weights against tokens in the lanes (sparse_f16_prefill_lanes). Included by the ISA files after
// gemm_float_impl.h (AVX2 and AVX-512); internal linkage.
#pragma once
#include <immintrin.h>

#include "compute/cpu/gemm_float_impl.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

// Group g in the F16Fma16 layout at out [n_blocks * 2][32 inputs][16 rows] fp16: per input of a group, each
// row's first kept value where it is the row's first kept input, its second where the second, else zero.
inline void expand_sparse_f16_group(const PackedView& w, int64_t g, uint8_t* out) {
  const __m256i three = _mm256_set1_epi16(3);
  for (int64_t b = 0; b < w.n_blocks; ++b) {
    const uint8_t* blk = w.data + static_cast<size_t>(g * w.n_blocks + b) * w.block_bytes;
    const uint8_t* positions = blk + sparse24_meta_offset(PackedLayout::S24_F16x16);  // [2][16 rows] u32
    auto* dst = reinterpret_cast<__m256i*>(out + static_cast<size_t>(b) * 2048);  // [64 inputs] x 16 fp16
    for (int half = 0; half < 2; ++half) {  // 32-input halves: one positions dword per row
      // rows 0-7 and 8-15: the half's positions from group k on, group k's in the low 4 bits
      __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(positions + 64 * half));
      __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(positions + 64 * half + 32));
      for (int k = 8 * half; k < 8 * half + 8; ++k) {
        // [16 rows] the group's two positions (4 bits; packus interleaves 128-bit lanes, the permute restores row order)
        const __m256i both = _mm256_permute4x64_epi64(_mm256_packus_epi32(_mm256_and_si256(lo, _mm256_set1_epi32(0xF)),
                                                                         _mm256_and_si256(hi, _mm256_set1_epi32(0xF))), 0xD8);
        lo = _mm256_srli_epi32(lo, 4);
        hi = _mm256_srli_epi32(hi, 4);
        const __m256i p0 = _mm256_and_si256(both, three), p1 = _mm256_srli_epi16(both, 2);
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * k));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * k + 32));
        for (int j = 0; j < 4; ++j) {
          const __m256i input = _mm256_set1_epi16(static_cast<short>(j));
          _mm256_storeu_si256(dst + 4 * k + j, _mm256_or_si256(_mm256_and_si256(_mm256_cmpeq_epi16(p0, input), v0),
                                                               _mm256_and_si256(_mm256_cmpeq_epi16(p1, input), v1)));
        }
      }
    }
  }
}

// y[t, 16 rows of group g] (+)= W x_t for T tokens, straight from the 2:4 bytes. S, an ISA's vector
// interface (Vec256, Vec512: type, itype, zero, load of floats or fp16, fma, add, store) plus kRows (rows per
// vector: the group is 16 / kRows vectors, "parts"), positions(p) (kRows 32-bit lanes from p),
// shift_right<n>(v) (each lane >> n), broadcast4(p) (4 floats in every 128-bit lane) and permute(x4, pos)
// (lane i takes its 128-bit lane's float pos[i] & 3). A row's positions dword shifted right by 2 x (its
// kept value's number in the 32-input half) gives that value's position in its low 2 bits, all the
// permute reads: the tile shifts by 4 per group (a variable count would cost AVX-512 a second operation on
// the shuffle port).
template <class S, int T>
void sparse_f16_group(const PackedView& w, const float* x, size_t x_stride, float* y, size_t ys, int64_t g, const uint8_t* after) {
  using vec = typename S::type;
  using ivec = typename S::itype;
  constexpr int P = 16 / S::kRows;  // parts of the group
  const size_t nb = static_cast<size_t>(w.n_blocks);
  vec acc[T][P][2];  // [token][part][kept value]: two FMA chains per row vector
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < P; ++h) acc[t][h][0] = acc[t][h][1] = S::zero();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kFloatPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    const auto* kept = reinterpret_cast<const uint16_t*>(blk);  // fp16 (group k, value s, row) at 32 k + 16 s + row
    const auto* positions = reinterpret_cast<const uint32_t*>(blk + sparse24_meta_offset(PackedLayout::S24_F16x16));  // [2][16 rows]
    for (int half = 0; half < 2; ++half) {  // 32-input halves: one positions dword per row
      ivec rest[P];  // per part: the rows' positions of the half's groups from k on, group k's in the low 4 bits
      for (int h = 0; h < P; ++h) rest[h] = S::positions(positions + 16 * half + S::kRows * h);
      for (int k = 8 * half; k < 8 * half + 8; ++k) {
        ivec pos[P][2];  // [part][kept value] the rows' positions in the group, in the low 2 bits
        vec wv[P][2];
        for (int h = 0; h < P; ++h) {
          pos[h][0] = rest[h];
          pos[h][1] = S::template shift_right<2>(rest[h]);  // shifts by constants: one operation each
          rest[h] = S::template shift_right<4>(rest[h]);
          for (int s = 0; s < 2; ++s) wv[h][s] = S::load(kept + 32 * k + 16 * s + S::kRows * h);
        }
        KESTREL_UNROLL
        for (int t = 0; t < T; ++t) {
          const vec x4 = S::broadcast4(x + static_cast<size_t>(t) * x_stride + 64 * b + 4 * static_cast<size_t>(k));
          for (int h = 0; h < P; ++h)
            for (int s = 0; s < 2; ++s) acc[t][h][s] = S::fma(wv[h][s], S::permute(x4, pos[h][s]), acc[t][h][s]);
        }
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < P; ++h) {
      float* yr = y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + static_cast<size_t>(S::kRows * h);
      const vec sum = S::add(acc[t][h][0], acc[t][h][1]);
      S::store(yr, w.accumulate ? S::add(S::load(yr), sum) : sum);
    }
}

// Up to kSparse24F16DirectTokens tokens, group by group (each group's prefetch running on into the next).
template <class S>
void sparse_f16_decode(const PackedView& w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  const size_t nb = static_cast<size_t>(w.n_blocks), n_in = nb * 64;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const uint8_t* after = g + 1 < group_end ? w.data + static_cast<size_t>(g + 1) * nb * w.block_bytes : w.next;
    switch (n_tok) {
      case 1: sparse_f16_group<S, 1>(w, x, n_in, y, ys, g, after); break;
      case 2: sparse_f16_group<S, 2>(w, x, n_in, y, ys, g, after); break;
      case 3: sparse_f16_group<S, 3>(w, x, n_in, y, ys, g, after); break;
      default: sparse_f16_group<S, 4>(w, x, n_in, y, ys, g, after); break;
    }
  }
}

template <class V>
void sparse_f16_prefill(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  const size_t group_bytes = sparse24_f16_dense_group_bytes(w.n_blocks * 64);
  uint8_t* dense = sparse24_group_buffer(static_cast<size_t>(kFloatGroupChunk) * group_bytes);  // [chunk] groups, F16Fma16
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kFloatGroupChunk) {
    const int64_t n = group_end - g0 < kFloatGroupChunk ? group_end - g0 : kFloatGroupChunk;
    for (int64_t i = 0; i < n; ++i) expand_sparse_f16_group(w, g0 + i, dense + static_cast<size_t>(i) * group_bytes);
    const PackedView d{dense, w.n_blocks * 2, 1024, nullptr, w.accumulate};
    float_gemm<V, FloatWeights::F16>(d, x, n_tok, y + static_cast<size_t>(g0) * 16, ys, 0, n);
  }
}

// Many tokens, the tokens in the lanes (AVX2, sparse_f16_prefill_lanes): y[t, row] is the sum over the row's
// kept inputs i of w[row, i] x[t, i], and with W tokens' x[., i] in one vector no permute is needed: each
// kept weight is broadcast and meets NT vectors of tokens, half the dense GEMM's FMAs and nothing on the
// shuffle port. Per call, token tile by token tile (TT = NT x W tokens), the activations are transposed into
// xt [n_in][TT] (the caller's takes are large: matmul.cpp); per group, block by block, RT rows at a time
// keep RT x NT accumulators in registers (in acc_rows between blocks, so the block's 64 inputs of xt stay
// in L1 for its 16 rows), and the positions decode with scalar shifts beside the FMAs. S: the vector
// interface (Vec256: type, W, load of floats and fp16, set1, fma, store) plus transpose_tokens(x, n_in,
// n_tok, t, i, out, out_stride): out[l * out_stride + j] = x[(t + j) * n_in + i + l] for W tokens j (zero
// from n_tok on) and W inputs l.
template <class S, int NT, int RT>
void sparse_f16_prefill_lanes(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin,
                              int64_t group_end) {
  using vec = typename S::type;
  constexpr int W = S::W, TT = NT * W;
  static_assert(16 % RT == 0, "row tiles fill a group");
  const size_t nb = static_cast<size_t>(w.n_blocks), n_in = nb * 64;
  auto* xt = reinterpret_cast<float*>(sparse24_group_buffer(n_in * TT * sizeof(float)));  // [n_in][TT]
  alignas(64) float kept[512];         // [16 groups][2 values][16 rows] one block's kept weights
  alignas(64) float acc_rows[16][TT];  // [16 rows][TT tokens] the group's sums so far
  for (int t0 = 0; t0 < n_tok; t0 += TT) {
    const int nt = n_tok - t0 < TT ? n_tok - t0 : TT;
    for (int v = 0; v < NT; ++v)
      for (size_t i = 0; i < n_in; i += W) S::transpose_tokens(x, n_in, n_tok, t0 + v * W, i, xt + i * TT + v * W, TT);
    for (int64_t g = group_begin; g < group_end; ++g) {
      for (auto& row : acc_rows)
        for (float& a : row) a = 0.0f;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
        const auto* halves = reinterpret_cast<const uint16_t*>(blk);  // fp16 (group k, value s, row) at 32 k + 16 s + row
        for (int j = 0; j < 512; j += W) S::store(kept + j, S::load(halves + j));
        const auto* positions = reinterpret_cast<const uint32_t*>(blk + sparse24_meta_offset(PackedLayout::S24_F16x16));  // [2][16 rows]
        const float* xb = xt + 64 * b * TT;  // [64 inputs][TT] the block's activations
        for (int r0 = 0; r0 < 16; r0 += RT) {
          vec acc[RT][NT];
          for (int r = 0; r < RT; ++r)
            for (int v = 0; v < NT; ++v) acc[r][v] = S::load(acc_rows[r0 + r] + v * W);
          for (int half = 0; half < 2; ++half) {  // 32-input halves: one positions dword per row
            uint32_t rest[RT];                    // [rows] the half's positions, group 8 half + i's at bits 4i
            for (int r = 0; r < RT; ++r) rest[r] = positions[16 * half + r0 + r];
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) {
              const int k = 8 * half + i;
              for (int r = 0; r < RT; ++r)
                for (int s = 0; s < 2; ++s) {
                  const vec wv = S::set1(kept[32 * k + 16 * s + r0 + r]);
                  const float* xi = xb + static_cast<size_t>(4 * k + ((rest[r] >> (4 * i + 2 * s)) & 3)) * TT;
                  for (int v = 0; v < NT; ++v) acc[r][v] = S::fma(wv, S::load(xi + v * W), acc[r][v]);
                }
            }
          }
          for (int r = 0; r < RT; ++r)
            for (int v = 0; v < NT; ++v) S::store(acc_rows[r0 + r] + v * W, acc[r][v]);
        }
      }
      for (int t = 0; t < nt; ++t) {
        float* yr = y + static_cast<size_t>(t0 + t) * ys + static_cast<size_t>(g) * 16;
        for (int r = 0; r < 16; ++r) yr[r] = w.accumulate ? yr[r] + acc_rows[r][t] : acc_rows[r][t];
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
