// AVX2 + FMA + F16C row-dot kernels: the float rows (dot_float_impl.h) and the integer path
// (dot_q8_impl.h with maddubs). Compiled with -mavx2 -mfma -mf16c and only called after run-time
// detection; everything in it has internal linkage so no AVX2 code leaks into functions the linker could
// pick for a baseline caller.
#include <immintrin.h>

#include "compute/cpu/dot.h"
#include "compute/cpu/simd_avx2.h"

namespace kestrel {
namespace {
// u8 x s8 -> int32 via maddubs (pairs to int16; |pair sum| <= 2 * 255 * 127 fits) and madd with ones.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
}  // namespace
}  // namespace kestrel

#include "compute/cpu/dot_float_impl.h"
#include "compute/cpu/dot_q8_impl.h"

namespace kestrel {
DotQ8Fn dot_q8_kernel_avx2(DType type) { return dot_q8_table(type); }
DotFn dot_kernel_avx2(DType type) { return dot_float_table<Vec256>(type); }
}  // namespace kestrel
