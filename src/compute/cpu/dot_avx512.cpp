// AVX-512 row-dot kernels: the float rows (dot_float_impl.h, 16 lanes) and the integer path
// (dot_q8_impl.h with VNNI). Compiled with AVX-512 flags and only called after run-time detection;
// everything has internal linkage.
#include <immintrin.h>

#include "compute/cpu/dot.h"
#include "compute/cpu/simd_avx512.h"

namespace kestrel {
namespace {
// u8 x s8 -> int32 with one VNNI instruction.
inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
}  // namespace
}  // namespace kestrel

#include "compute/cpu/dot_float_impl.h"
#include "compute/cpu/dot_q8_impl.h"

namespace kestrel {
DotQ8Fn dot_q8_kernel_avx512(DType type) { return dot_q8_table(type); }
DotFn dot_kernel_avx512(DType type) { return dot_float_table<Vec512>(type); }
}  // namespace kestrel
