// Quantization that fits each block to minimise the importance-weighted squared error
// sum_i w[i] * (x[i] - dequantized[i])^2 of a row, for calibration-aware quantization ("imatrix"): w[i] is
// the mean square of input channel i's activations over a calibration text, so the error where inputs are
// large, which is the error the matrix product sees, counts for more.
//
// Per block (or sub-block) the scale is searched: candidate scales around the round-to-nearest one, each
// with its codes and the weighted least-squares scale (and, for Q4_K, offset) for those codes; the best
// fit is kept and the block encoded with it (quant/block_pack.h). Blocks whose weights are all zero use
// equal weights. With equal weights this is a better fit than round-to-nearest (quant/quantize.h), whose
// scale comes from the block's extreme value alone.
#pragma once
#include <cstddef>

#include "core/dtype.h"

namespace kestrel {

// row in `type` <- x[n] (n a multiple of the type's block size); weights: [n] importance of each element
// (>= 0), or null for equal weights. Float types are converted as quantize_row converts them.
void quantize_row_weighted(DType type, const float* x, void* row, size_t n, const float* weights);

// The values quantize_row_weighted gives one group of 32 weights x[32] with weights[32] (or null): a Q8_0,
// Q4_0, Q4_1, Q5_0 or Q5_1 block exactly; for Q4_K and Q5_K (one sub-block) and Q6_K (two) the values under the searched sub-block
// scales before the format stores them in 6 or 8 bits, so close to what the row gets. Float types: x.
// Cheap enough to call per candidate in searches over one group (AWQ's clip search).
void fit_group_weighted(DType type, const float* x, const float* weights, float* fitted);

}  // namespace kestrel
