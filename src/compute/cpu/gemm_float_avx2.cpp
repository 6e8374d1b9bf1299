// AVX2 build of the float GEMM (gemm_float_impl.h): 16 rows as two vectors, 6 tokens, 12 accumulators.
#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/gemm_float_impl.h"

namespace kestrel {
PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout) { return float_gemm_table<Vec256>(layout); }
}  // namespace kestrel
