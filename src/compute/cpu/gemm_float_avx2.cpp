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

void sparse_f16_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= kSparse24F16DirectTokens) return sparse_f16_decode<SparseF16Avx2>(w, x, n_tok, y, ys, group_begin, group_end);
  sparse_f16_prefill<Vec256>(w, x, n_tok, y, ys, group_begin, group_end);
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout) {
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  return float_gemm_table<Vec256>(layout);
}
}  // namespace kestrel
