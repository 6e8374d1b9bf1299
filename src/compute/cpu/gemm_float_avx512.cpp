// AVX-512 builds of the float GEMM of gemm_float_impl.h, 16 rows in one vector: the F32Fma16 layout's, and the
// 2:4 F16 layout's prefill (gemm_sparse_f16_impl.h: expanded groups, then the dense GEMM): exact F16 weights
// against float activations, as the sparse decode tiles take them, so a model's tokens get the same weights
// however they are batched (a few tokens run the AVX2 sparse tiles). Compiled with AVX-512 flags; entered
// after run-time detection.
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
  if (layout == PackedLayout::S24_F16x16) return sparse_f16_gemm;
  if (layout == PackedLayout::F32Fma16) return float_gemm_table<Vec512>(layout);  // 16 rows in one vector
  return nullptr;  // F16 / BF16 pack as BF16x16 here (AVX-512 BF16), else run the AVX2 kernels
}

}  // namespace kestrel
