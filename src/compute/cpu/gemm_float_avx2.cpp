// AVX2 build of the float GEMM (gemm_float_impl.h): 16 rows as two vectors, 6 tokens, 12 accumulators; and
// the 2:4 F16 layout's (S24_F16x16, gemm_sparse_f16_impl.h) with 8 rows per vector.
#include <immintrin.h>

#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/gemm_float_impl.h"
#include "compute/cpu/gemm_sparse_f16_impl.h"

namespace kestrel {
namespace {

// The 2:4 F16 decode tile's operations (gemm_sparse_f16_impl.h): Vec256's, 8 rows per vector.
struct SparseF16Avx2 : Vec256 {
  static constexpr int kRows = 8;
  static itype positions(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  template <int n>
  static itype shift_right(itype v) { return _mm256_srli_epi32(v, n); }
  static type broadcast4(const float* p) { return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p)); }
  static type permute(type x4, itype pos) { return _mm256_permutevar_ps(x4, pos); }
};

// The 2:4 F16 prefill with the tokens in the lanes (gemm_sparse_f16_impl.h): kLaneVectors vectors of 8
// tokens by 2 rows, 12 accumulators; and its operations.
constexpr int kLaneVectors = kSparse24F16LaneTokens / 8;
struct SparseF16LanesAvx2 : Vec256 {
  // out[l * out_stride + j] = x[(t + j) * n_in + i + l] for 8 tokens j (zero past n_tok) and 8 inputs l.
  static void transpose_tokens(const float* x, size_t n_in, int n_tok, int t, size_t i, float* out, size_t out_stride) {
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = t + j < n_tok ? _mm256_loadu_ps(x + static_cast<size_t>(t + j) * n_in + i) : _mm256_setzero_ps();
    __m256 a[8], b[8];
    for (int j = 0; j < 8; j += 2) a[j] = _mm256_unpacklo_ps(r[j], r[j + 1]), a[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    for (int j = 0; j < 8; j += 4) {
      b[j] = _mm256_shuffle_ps(a[j], a[j + 2], 0x44);
      b[j + 1] = _mm256_shuffle_ps(a[j], a[j + 2], 0xEE);
      b[j + 2] = _mm256_shuffle_ps(a[j + 1], a[j + 3], 0x44);
      b[j + 3] = _mm256_shuffle_ps(a[j + 1], a[j + 3], 0xEE);
    }
    for (int l = 0; l < 4; ++l) {
      _mm256_storeu_ps(out + static_cast<size_t>(l) * out_stride, _mm256_permute2f128_ps(b[l], b[l + 4], 0x20));
      _mm256_storeu_ps(out + static_cast<size_t>(l + 4) * out_stride, _mm256_permute2f128_ps(b[l], b[l + 4], 0x31));
    }
  }
};

void sparse_f16_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= kSparse24F16DirectTokens) return sparse_f16_decode<SparseF16Avx2>(w, x, n_tok, y, ys, group_begin, group_end);
  if (n_tok < kSparse24F16LaneTokens) return sparse_f16_prefill<Vec256>(w, x, n_tok, y, ys, group_begin, group_end);
  // Tokens in the lanes, half the dense FMAs (the FMA units bound AVX2's float GEMM), for whole tiles and a
  // last tile that fills most of its lanes (one with 40 of 48 tokens costs what 38 cost the dense GEMM);
  // the tokens of a smaller last tile go the way fewer tokens go.
  const int tail = n_tok % kSparse24F16LaneTokens, lane_tokens = tail >= 40 ? n_tok : n_tok - tail;
  sparse_f16_prefill_lanes<SparseF16LanesAvx2, kLaneVectors, 2>(w, x, lane_tokens, y, ys, group_begin, group_end);
  if (lane_tokens < n_tok)
    sparse_f16_gemm(w, x + static_cast<size_t>(lane_tokens) * static_cast<size_t>(w.n_blocks) * 64, n_tok - lane_tokens,
                    y + static_cast<size_t>(lane_tokens) * ys, ys, group_begin, group_end);
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout) {
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  return float_gemm_table<Vec256>(layout);
}
}  // namespace kestrel
