// GPTQ (Frantar et al., 2022): quantizes a weight matrix column by column, and after each column spreads
// its rounding error over the columns not yet quantized, through the inverse Hessian of the layer's
// inputs, so that the product W X — not W itself — stays as close as the grid allows:
//   H = X^T X / n (+ damping), U = upper Cholesky factor of H^-1,
//   for each column i: q_i = grid value nearest w_i; e = (w_i - q_i) / U_ii; w_j -= e U_ij for j > i.
// Updates are lazy in batches of columns (one small triangular update per batch, then one product for the
// rest). Each block's scales are chosen when its first column is reached, from the weights as updated so
// far, by the importance-weighted search of quant/importance_quantize.h with diag(H) as the importance;
// with act-order the columns go in order of decreasing diag(H) and every block's scales are chosen
// first, from the original weights ("static groups"). The result is an ordinary block-format row, which any
// GGUF reader runs.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace kestrel {

struct GptqOptions {
  double damp = 0.01;        // added to H's diagonal, as a fraction of the diagonal's mean
  int batch_columns = 256;   // columns per lazy batch (a multiple of 256)
  bool act_order = false;    // quantize columns in order of decreasing H_jj
};

// out [n_out rows of `type`] <- w [n_out][n_in]; h [n_in][n_in]: the symmetric input Hessian X^T X / n.
// type must have a block grid (quant/block_grid.h) and n_in be a multiple of its block size. Input
// channels no token reached (H_jj = 0) are quantized from zero weights: they never affect the output.
// Error: H is not positive definite even with 1000x the damping (non-finite inputs).
Status gptq_quantize(DType type, const float* w, int64_t n_out, int64_t n_in, const float* h, const GptqOptions& options,
                     uint8_t* out, ThreadPool& pool);

}  // namespace kestrel
