// The W8A8 matrix product: int8 weights with per-row scales times activations quantized to int8 per token
// (or with a calibrated static scale), integer dot products, and LLM.int8-style outlier channels in float
// (the contract of Int8Scales in compute/ops.h). ops::matmul routes DType::I8 matrices here.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/ops.h"

namespace kestrel {

// One input row in 8 bits for an int8 matrix: q[n] (outlier channels 0) and the scale x ~ q * scale.
// Dynamic (scales.input_scale == 0): max|x| over the other channels / 127 (0 for an all-zero row).
// Static: scales.input_scale, values beyond +-127 of it clamped. The spec the GEMM is tested against.
float quantize_w8a8_input_row(const Int8Scales& scales, const float* x, size_t n, int8_t* q);

// y[n_tok, w.n_out] = (or += with accumulate) x[n_tok, w.n_in] . W^T for w.type == DType::I8 with w.int8 set.
void matmul_w8a8(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok, bool accumulate);

}  // namespace kestrel
