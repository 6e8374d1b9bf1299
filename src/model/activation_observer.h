// A calibration hook on the forward pass: sees the input rows of every weight-matrix product, so a
// quantizer can measure which input channels carry large activations (importance) before it quantizes.
// Set it in the ForwardWorkspace of the forwards to observe; the forward's results do not change.
#pragma once
#include <span>

#include "compute/ops.h"

namespace kestrel {

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // x: [n_tok, n_in], the rows the matrices ms (one or more sharing this input, e.g. q, k and v; all with
  // the same n_in) are about to multiply, after the block's norm where the GEMM folds it in. For 3-D
  // tensors a matrix is one expert's (or one head's) slice; WeightMatrix::data tells slices apart.
  virtual void observe(std::span<const WeightMatrix> ms, const float* x, int n_tok) = 0;
};

}  // namespace kestrel
