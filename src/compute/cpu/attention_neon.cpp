// The page-wise attention kernel compiled for AArch64 NEON (see attention_impl.h).
#include "compute/cpu/simd_neon.h"

namespace kestrel {
namespace {
struct AttendVec128 : Vec128 {
  static constexpr int kMaxGroup = 4;  // 4 vectors per head per tile: 16 score registers of 32
  static constexpr int kTileKeys = 16;  // keys scored per tile
  static constexpr int kValueSlices = 2;  // value slices accumulated together
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {
AttendFn attend_kernel_neon(bool f16) { return f16 ? attend<AttendVec128, uint16_t> : attend<AttendVec128, float>; }
}  // namespace kestrel
