// AVX2 build of the float GEMM (gemm_float_impl.h): 16 rows as two vectors, 6 tokens, 12 accumulators; and
// the 2:4 F16 layout's (S24_F16x16): for a few tokens, per 4-input group each row's two kept weights meet the
// activations at their positions, picked from the group's 4 by an in-lane permute (also on AVX-512 CPUs);
// for more, groups expanded into the F16Fma16 layout and the dense GEMM (gemm_sparse_f16_impl.h).
#include <immintrin.h>

#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/gemm_float_impl.h"
#include "compute/cpu/gemm_sparse_f16_impl.h"

namespace kestrel {
namespace {

// The masks of the 8 rows of `half` for group k of a block (low bits of each 32-bit lane; see packed_sparse24.h).
inline __m256i group_masks(const uint8_t* blk, int k, int half) {
  const uint8_t* masks = blk + sparse24_masks_offset(PackedLayout::S24_F16x16) + 16 * (k / 2) + 8 * half;
  const __m256i m = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(masks)));
  return k % 2 ? _mm256_srli_epi32(m, 4) : m;
}

// y[t, 16 rows of group g] (+)= W x_t for T tokens, straight from the 2:4 bytes.
template <int T>
void sparse_f16_group(const PackedView& w, const float* x, size_t x_stride, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kSparse24Position[0].data()));
  const __m256i second = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kSparse24Position[1].data()));
  __m256 acc[T][2][2];  // [token][half][kept value]: two FMA chains per row vector
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h) acc[t][h][0] = acc[t][h][1] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kFloatPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    const auto* kept = reinterpret_cast<const __m128i*>(blk);  // 8 fp16 per 16 bytes: (group, value, half)
    for (int k = 0; k < 16; ++k) {
      __m256i pos[2][2];  // [half][kept value] the rows' positions in the group
      __m256 wv[2][2];
      for (int h = 0; h < 2; ++h) {
        const __m256i m = group_masks(blk, k, h);
        pos[h][0] = _mm256_permutevar8x32_epi32(first, m);
        pos[h][1] = _mm256_permutevar8x32_epi32(second, m);
        for (int s = 0; s < 2; ++s) wv[h][s] = _mm256_cvtph_ps(_mm_loadu_si128(kept + 4 * k + 2 * s + h));
      }
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256 x4 = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x + static_cast<size_t>(t) * x_stride + 64 * b + 4 * static_cast<size_t>(k)));
        for (int h = 0; h < 2; ++h)
          for (int s = 0; s < 2; ++s) acc[t][h][s] = _mm256_fmadd_ps(wv[h][s], _mm256_permutevar_ps(x4, pos[h][s]), acc[t][h][s]);
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h) {
      float* yr = y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16 + 8 * static_cast<size_t>(h);
      const __m256 sum = _mm256_add_ps(acc[t][h][0], acc[t][h][1]);
      _mm256_storeu_ps(yr, w.accumulate ? _mm256_add_ps(_mm256_loadu_ps(yr), sum) : sum);
    }
}

void sparse_f16_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  const size_t n_in = static_cast<size_t>(w.n_blocks) * 64;
  const size_t nb = static_cast<size_t>(w.n_blocks);
  if (n_tok <= kSparse24F16DirectTokens) {
    for (int64_t g = group_begin; g < group_end; ++g) {
      const uint8_t* after = g + 1 < group_end ? w.data + static_cast<size_t>(g + 1) * nb * w.block_bytes : w.next;
      switch (n_tok) {
        case 1: sparse_f16_group<1>(w, x, n_in, y, ys, g, after); break;
        case 2: sparse_f16_group<2>(w, x, n_in, y, ys, g, after); break;
        case 3: sparse_f16_group<3>(w, x, n_in, y, ys, g, after); break;
        default: sparse_f16_group<4>(w, x, n_in, y, ys, g, after); break;
      }
    }
    return;
  }
  sparse_f16_prefill<Vec256>(w, x, n_tok, y, ys, group_begin, group_end);
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout) {
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  return float_gemm_table<Vec256>(layout);
}
}  // namespace kestrel
