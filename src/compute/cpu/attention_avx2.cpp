// The page-wise attention kernel compiled for AVX2 + FMA + F16C (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

#include "compute/cpu/simd_avx2.h"

namespace kestrel {
namespace {
struct AttendVec256 : Vec256 {
  static constexpr int kMaxGroup = 4;  // 2 vectors per head per tile: 8 score registers of 16
  static constexpr int kTileKeys = 16;  // keys scored per tile
  static constexpr int kValueSlices = 2;  // value slices accumulated together
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx2(bool f16) { return f16 ? attend<AttendVec256, uint16_t> : attend<AttendVec256, float>; }
}  // namespace kestrel
