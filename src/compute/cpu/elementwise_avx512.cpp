// AVX-512 build of the elementwise kernels (elementwise_impl.h).
#include "compute/cpu/simd_avx512.h"
#include "compute/cpu/elementwise_impl.h"

namespace kestrel {
SiluMulFn silu_mul_kernel_avx512() { return silu_mul_impl<Vec512>; }
}  // namespace kestrel
