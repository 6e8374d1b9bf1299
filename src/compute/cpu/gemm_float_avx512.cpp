// AVX-512 build of the 2:4 F16 layout's prefill (gemm_sparse_f16_impl.h: expanded groups, then the float
// GEMM of gemm_float_impl.h with 16 rows in one vector): exact F16 weights against float activations, as
// the sparse decode tiles take them, so a model's tokens get the same weights however they are batched.
// A few tokens run the AVX2 sparse tiles. Compiled with AVX-512 flags; entered after run-time detection.
#include "compute/cpu/simd_avx512.h"
#include "compute/cpu/gemm_sparse_f16_impl.h"

namespace kestrel {
namespace {

void sparse_f16_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= kSparse24F16DirectTokens) return packed_gemm_f32_kernel_avx2(PackedLayout::S24_F16x16)(w, x, n_tok, y, ys, group_begin, group_end);
  sparse_f16_prefill<Vec512>(w, x, n_tok, y, ys, group_begin, group_end);
}

}  // namespace

PackedGemmF32Fn packed_gemm_f32_kernel_avx512(PackedLayout layout) {
  return layout == PackedLayout::S24_F16x16 ? sparse_f16_gemm : nullptr;
}

}  // namespace kestrel
