// Integer GEMM on 16-row packed weights with AVX2 (no VNNI): each 16-row group is done as two 8-row
// halves (lanes = rows); u8 x s8 products go through maddubs/madd. Q8_0 uses |w| and sign-adjusted
// activations so maddubs cannot saturate. Compiled with AVX2 flags; internal linkage throughout.
#include <immintrin.h>

#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr int kTokens = 4;
constexpr int64_t kGroupChunk = 4;  // row groups whose weights stay in cache while token tiles pass
constexpr size_t kPrefetchBlocks = 6;  // how far ahead weights are prefetched

inline __m256i madd_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Rows [8 * half, 8 * half + 8) of group g against T tokens.
template <PackedLayout L, int T>
void half_tile(PackedView w, const BlockQ8A* xq, size_t nb, float* y, size_t ys, int64_t g, int half) {
  const __m256i m4 = _mm256_set1_epi8(0xF), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * static_cast<size_t>(w.n_blocks) + b) * w.block_bytes;
    // Software prefetch a few blocks ahead: with several tokens per block the out-of-order window spans
    // too few blocks to keep enough loads in flight while weights stream from memory.
    if constexpr (T > 1)
      for (size_t off = 0; off < w.block_bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetchBlocks * w.block_bytes + off), _MM_HINT_T0);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * half)));
    __m256i q[8];  // inputs 4k..4k+3 of the 8 rows: u8 (Q4_0) or signed (Q8_0)
    if constexpr (L == PackedLayout::Q4_0x16) {
      for (int k = 0; k < 4; ++k) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * k + 32 * half));
        q[k] = _mm256_and_si256(packed, m4);
        q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), m4);
      }
    } else {
      for (int k = 0; k < 8; ++k)
        q[k] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * k + 32 * half)), flip);
    }
    for (int t = 0; t < T; ++t) {
      const BlockQ8A& xb = xq[static_cast<size_t>(t) * nb + b];
      const auto* x4 = reinterpret_cast<const int32_t*>(xb.qs);
      __m256i s = L == PackedLayout::Q4_0x16 ? _mm256_set1_epi32(-8 * (xb.sum16[0] + xb.sum16[1])) : _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i x = _mm256_set1_epi32(x4[k]);
        if constexpr (L == PackedLayout::Q4_0x16)
          s = _mm256_add_epi32(s, madd_u8s8(q[k], x));
        else
          s = _mm256_add_epi32(s, madd_u8s8(_mm256_sign_epi8(q[k], q[k]), _mm256_sign_epi8(x, q[k])));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * half;
    _mm256_storeu_ps(yt, w.accumulate ? _mm256_add_ps(_mm256_loadu_ps(yt), acc[t]) : acc[t]);
  }
}

template <PackedLayout L>
void gemm(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t ys, int64_t group_begin,
          int64_t group_end) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kGroupChunk) {
    const int64_t g1 = group_end < g0 + kGroupChunk ? group_end : g0 + kGroupChunk;
    for (int t0 = 0; t0 < n_tok; t0 += kTokens) {
      const BlockQ8A* x = xq + static_cast<size_t>(t0) * nb;
      float* yt = y + static_cast<size_t>(t0) * ys;
      for (int64_t g = g0; g < g1; ++g)
        for (int half = 0; half < 2; ++half) {
          switch (n_tok - t0 < kTokens ? n_tok - t0 : kTokens) {
            case 1: half_tile<L, 1>(w, x, nb, yt, ys, g, half); break;
            case 2: half_tile<L, 2>(w, x, nb, yt, ys, g, half); break;
            case 3: half_tile<L, 3>(w, x, nb, yt, ys, g, half); break;
            default: half_tile<L, 4>(w, x, nb, yt, ys, g, half); break;
          }
        }
    }
  }
}

}  // namespace

PackedGemmFn packed_gemm_kernel_avx2(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::Q4_0x16: return gemm<PackedLayout::Q4_0x16>;
    case PackedLayout::Q8_0x16: return gemm<PackedLayout::Q8_0x16>;
    default: return nullptr;  // K-quants: the row-dot kernels (PackedMatrix::supports says so)
  }
  return nullptr;
}

}  // namespace kestrel
