// NEON build of the float GEMM (gemm_float_impl.h): 16 rows as four vectors, 6 tokens, 24 accumulators.
#include "compute/cpu/simd_neon.h"
#include "compute/cpu/gemm_float_impl.h"

namespace kestrel {
PackedGemmF32Fn packed_gemm_f32_kernel_neon(PackedLayout layout) { return float_gemm_table<Vec128>(layout); }
}  // namespace kestrel
