// NEON build of the elementwise kernels (elementwise_impl.h).
#include "compute/cpu/simd_neon.h"
#include "compute/cpu/elementwise_impl.h"

namespace kestrel {
SiluMulFn silu_mul_kernel_neon() { return silu_mul_impl<Vec128>; }
}  // namespace kestrel
