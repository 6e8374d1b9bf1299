// KESTREL_DOT_Q8_DISPATCH(kernel): a DotQ8Fn (dot.h) from a kernel template over the token count,
// kernel<NT>(row, x, x_stride, n, out, out_stride) for NT = 1..kDotQ8MaxTokens. Used by the per-ISA files.
#pragma once

// Turns a kernel template into a DotQ8Fn that dispatches on the token count.
#define KESTREL_DOT_Q8_DISPATCH(kernel)                                                                     \
  [](const void* row, const BlockQ8A* x, size_t xs, int n_tok, size_t n, float* out, size_t os) {           \
    switch (n_tok) {                                                                                        \
      case 1: kernel<1>(row, x, xs, n, out, os); break;                                                     \
      case 2: kernel<2>(row, x, xs, n, out, os); break;                                                     \
      case 3: kernel<3>(row, x, xs, n, out, os); break;                                                     \
      case 4: kernel<4>(row, x, xs, n, out, os); break;                                                     \
      case 5: kernel<5>(row, x, xs, n, out, os); break;                                                     \
      case 6: kernel<6>(row, x, xs, n, out, os); break;                                                     \
      case 7: kernel<7>(row, x, xs, n, out, os); break;                                                     \
      default: kernel<8>(row, x, xs, n, out, os); break;                                                    \
    }                                                                                                       \
  }
