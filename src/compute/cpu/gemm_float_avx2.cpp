// AVX2 build of the float GEMM (gemm_float_impl.h): 16 rows as two vectors, 6 tokens, 12 accumulators; and
// the 2:4 F16 layout's (S24_F16x16): for a few tokens, per 4-input group each row's two kept weights meet the
// activations at their positions, picked from the group's 4 by an in-lane permute; for more, each group
// expanded into the F16Fma16 layout and the dense GEMM.
#include <immintrin.h>

#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/gemm_float_impl.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

constexpr int kSparseDirectTokens = 4;  // up to this many tokens the sparse weights are multiplied directly

// Per pattern id (0..7): the first and the second kept position, as 32-bit lanes.
constexpr std::array<std::array<uint32_t, 8>, 2> kKeptPosition = [] {
  std::array<std::array<uint32_t, 8>, 2> p{};
  for (int c = 0; c < 6; ++c)
    for (int s = 0; s < 2; ++s) p[static_cast<size_t>(s)][static_cast<size_t>(c)] = kSparse24Pairs[c][s];
  return p;
}();

// y[t, 16 rows of group g] (+)= W x_t for T tokens, straight from the 2:4 bytes.
template <int T>
void sparse_f16_group(const PackedView& w, const float* x, size_t x_stride, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kKeptPosition[0].data()));
  const __m256i second = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kKeptPosition[1].data()));
  __m256 acc[T][2][2];  // [token][half][kept value]: two FMA chains per row vector
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h) acc[t][h][0] = acc[t][h][1] = _mm256_setzero_ps();
  const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * w.block_bytes;
    prefetch_block(block_ahead(blk, b, kFloatPrefetchBlocks, nb, w.block_bytes, after), w.block_bytes);
    const auto* ids = reinterpret_cast<const long long*>(blk + sparse24_ids_offset(PackedLayout::S24_F16x16));
    const auto* kept = reinterpret_cast<const __m128i*>(blk);  // 8 fp16 per 16 bytes: (group, value, half)
    for (int k = 0; k < 16; ++k) {
      __m256i pos[2][2];  // [half][kept value] the rows' positions in the group
      for (int h = 0; h < 2; ++h) {
        const __m256i shift = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kSparse24IdShift.data() + 8 * h));
        const __m256i id = _mm256_srlv_epi32(_mm256_set1_epi64x(ids[k]), shift);
        pos[h][0] = _mm256_permutevar8x32_epi32(first, id);
        pos[h][1] = _mm256_permutevar8x32_epi32(second, id);
      }
      __m256 wv[2][2];
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 2; ++s) wv[h][s] = _mm256_cvtph_ps(_mm_loadu_si128(kept + 4 * k + 2 * s + h));
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
  if (n_tok <= kSparseDirectTokens) {
    for (int64_t g = group_begin; g < group_end; ++g) {
      const uint8_t* after = g + 1 < group_end ? w.data + static_cast<size_t>(g + 1) * nb * w.block_bytes : w.next;
      for (int t0 = 0; t0 < n_tok; t0 += 4) {  // n_tok <= 4: one tile
        const float* xt = x + static_cast<size_t>(t0) * n_in;
        float* yt = y + static_cast<size_t>(t0) * ys;
        switch (n_tok - t0) {
          case 1: sparse_f16_group<1>(w, xt, n_in, yt, ys, g, after); break;
          case 2: sparse_f16_group<2>(w, xt, n_in, yt, ys, g, after); break;
          case 3: sparse_f16_group<3>(w, xt, n_in, yt, ys, g, after); break;
          default: sparse_f16_group<4>(w, xt, n_in, yt, ys, g, after); break;
        }
      }
    }
    return;
  }
  // one group in the F16Fma16 layout
  uint8_t* dense = sparse24_group_buffer(sparse24_dense_group_bytes(PackedLayout::S24_F16x16, static_cast<int64_t>(n_in)));
  for (int64_t g = group_begin; g < group_end; ++g) {
    expand_sparse24_group(PackedLayout::S24_F16x16, w, g, dense);
    const PackedView d{dense, w.n_blocks * 2, 1024, nullptr, w.accumulate};
    float_gemm<Vec256, false>(d, x, n_tok, y + static_cast<size_t>(g) * 16, ys, 0, 1);
  }
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout) {
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  return float_gemm_table<Vec256>(layout);
}
}  // namespace kestrel
