// AVX-512 builds of the float GEMM of gemm_float_impl.h, 16 rows in one vector: the F32Fma16 layout's, and the
// 2:4 F16 layout's prefill (gemm_sparse_f16_impl.h: expanded groups, then the dense GEMM): exact F16 weights
// against float activations, as its decode tiles take them, so a model's tokens get the same weights however
// they are batched. Compiled with AVX-512 flags; entered after run-time detection.
#include "compute/cpu/simd_avx512.h"
#include "compute/cpu/gemm_sparse_f16_impl.h"

namespace kestrel {
namespace {

// The 2:4 F16 decode tile's operations (gemm_sparse_f16_impl.h): Vec512's, the group's 16 rows in one vector (on Intel
// cores, whose widening and permutes share one port, half the AVX2 tile's operations per weight).
struct SparseF16Avx512 : Vec512 {
  static constexpr int kRows = 16;
  static itype positions(const uint32_t* p) { return _mm512_loadu_si512(p); }
  template <int n>
  static itype shift_right(itype v) { return _mm512_srli_epi32(v, n); }
  static type broadcast4(const float* p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }
  static type permute(type x4, itype pos) { return _mm512_permutevar_ps(x4, pos); }
};

void sparse_f16_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= kSparse24F16DirectTokens) return sparse_f16_decode<SparseF16Avx512>(w, x, n_tok, y, ys, group_begin, group_end);
  sparse_f16_prefill<Vec512>(w, x, n_tok, y, ys, group_begin, group_end);
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx512(PackedLayout layout) {
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  if (layout == PackedLayout::F32Fma16) return float_gemm_table<Vec512>(layout);  // 16 rows in one vector
  return nullptr;  // F16 / BF16 pack as BF16x16 here (AVX-512 BF16), else run the AVX2 kernels
}

}  // namespace kestrel
