// NEON build of the int8 row dots (int8_dot.h): signed 8-bit dot products (sdot), 16 inputs a step.
#include <arm_neon.h>

#include "compute/cpu/int8_dot_rows.h"
#include "compute/cpu/prefetch.h"

namespace kestrel {
namespace {

template <int NT>
struct RowDot {
  static void dot(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out, const int8_t* prefetch);
};

template <int NT>
void RowDot<NT>::dot(const int8_t* w, const int8_t* x, size_t x_stride, size_t n, int32_t* out, const int8_t* prefetch) {
  int32x4_t acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = vdupq_n_s32(0);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (prefetch && i % 64 == 0) prefetch_line(prefetch + i);
    const int8x16_t wv = vld1q_s8(w + i);
    for (int t = 0; t < NT; ++t) acc[t] = vdotq_s32(acc[t], wv, vld1q_s8(x + t * x_stride + i));
  }
  for (int t = 0; t < NT; ++t) {
    int32_t sum = vaddvq_s32(acc[t]);
    for (size_t j = i; j < n; ++j) sum += int32_t{w[j]} * int32_t{x[t * x_stride + j]};
    out[t] = sum;
  }
}

}  // namespace

Int8Kernels int8_kernels_neon() { return {dot_i8_row_by_row<RowDot>, nullptr, nullptr}; }

}  // namespace kestrel
