// Weight pruning of one matrix: which weights become zero. Scores compare weights by how much removing
// each one moves the layer's output:
//   magnitude: |w_ij|, compared across the whole matrix (layer-wise magnitude pruning);
//   Wanda:     |w_ij| * ||x_j||, the weight times the norm of its input channel's activations over a
//              calibration text, compared within each output row (Sun et al., "A Simple and Effective
//              Pruning Approach for Large Language Models"): a small weight on a channel that carries
//              large inputs matters as much as a large one on a quiet channel.
// Patterns: unstructured (the lowest-scoring fraction `sparsity` of each comparison group), or 2:4 (in
// every group of 4 consecutive inputs of a row the 2 lowest-scoring weights; the layout sparse kernels
// read, quant/sparse24.h).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"

namespace kestrel {

enum class PruneMethod { Magnitude, Wanda };
enum class PrunePattern { Unstructured, TwoFour };

struct PruneSpec {
  PruneMethod method = PruneMethod::Magnitude;
  PrunePattern pattern = PrunePattern::Unstructured;
  double sparsity = 0.5;  // unstructured: the fraction zeroed, in [0, 1); 2:4 is always one half
};

// Zeroes the pruned weights of w [n_out][n_in] in place, rows split across the pool's threads.
// input_norm [n_in]: each input channel's activation norm (any positive scale; the root of the
// calibration's mean square does); required for Wanda, ignored by magnitude. 2:4 needs n_in % 4 == 0.
// Weights that are zero already count among the pruned ones (re-pruning a pruned matrix is idempotent).
void prune_matrix(float* w, int64_t n_out, int64_t n_in, const PruneSpec& spec, const float* input_norm, ThreadPool& pool);

}  // namespace kestrel
