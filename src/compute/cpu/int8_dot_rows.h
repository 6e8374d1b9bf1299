// For ISA files whose int8 kernel dots one weight row at a time (int8_dot.h): a tile of rows as one call
// per row. Included only by those files (one per architecture); internal linkage.
#pragma once
#include "compute/cpu/int8_dot.h"

namespace kestrel {
namespace {

// The DotI8Fn contract, row by row, over Row<NT>::dot(w, x, x_stride, n, out, prefetch): one row against NT
// tokens (NT = 1..4), out[t] for t < NT.
template <template <int> class Row>
void dot_i8_row_by_row(const int8_t* w, size_t w_stride, int n_rows, const int8_t* x, size_t x_stride, int n_tok,
                       size_t n, int32_t* out, const int8_t* prefetch) {
  for (int r = 0; r < n_rows; ++r) {
    const int8_t* row = w + static_cast<size_t>(r) * w_stride;
    const int8_t* ahead = prefetch ? prefetch + static_cast<size_t>(r) * w_stride : nullptr;
    int32_t* row_out = out + r * kDotI8MaxTokens;
    switch (n_tok) {
      case 1: Row<1>::dot(row, x, x_stride, n, row_out, ahead); break;
      case 2: Row<2>::dot(row, x, x_stride, n, row_out, ahead); break;
      case 3: Row<3>::dot(row, x, x_stride, n, row_out, ahead); break;
      default: Row<4>::dot(row, x, x_stride, n, row_out, ahead); break;
    }
  }
}

}  // namespace
}  // namespace kestrel
