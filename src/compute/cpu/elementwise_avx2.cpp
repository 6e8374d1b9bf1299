// AVX2 build of the elementwise kernels (elementwise_impl.h).
#include "compute/cpu/simd_avx2.h"
#include "compute/cpu/elementwise_impl.h"

namespace kestrel {
SiluMulFn silu_mul_kernel_avx2() { return silu_mul_impl<Vec256>; }
}  // namespace kestrel
