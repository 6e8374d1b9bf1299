// AWQ (Lin et al., 2023), activation-aware weight scaling: before rounding, input channel j of the
// matrices that share one input is multiplied by s_j and the input divided by s_j (folded into the op
// that produces it: a norm's weight, the rows of the matrix before), which changes nothing in float but
// gives the channels that carry large activations finer steps on the grid. s_j = a_j^alpha with a_j the
// channel's RMS activation, alpha searched on a grid over [0, 1], normalised to a geometric mean of one.
//
// Each candidate is scored by the output error it would leave, sum over the matrices of
// tr((W' - W) H (W' - W)^T) with W' = Q(W diag(s)) diag(1/s) and H = X^T X / n the inputs' Hessian, which
// is exactly the mean squared output error over the calibration tokens — so no activations are kept.
// alpha = 0 (s = 1) is plain rounding and among the candidates: the search never does worse on the
// calibration text.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace kestrel {

// One matrix of the group: rows [n_out][n_in] of floats, to be quantized to `type` row by row by the
// importance-weighted search (quant/importance_quantize.h) with the scaled inputs' importance H_jj / s_j^2.
struct AwqMatrix {
  const float* w;
  int64_t n_out;
  DType type;
};

struct AwqOptions {
  int grid = 20;            // alpha in {0, 1/grid, ..., 1}
  int64_t max_rows = 512;   // rows of each matrix scored per candidate (evenly spaced), to bound the cost
};

struct AwqScales {
  std::vector<float> s;     // [n_in] > 0; all ones when alpha = 0 won
  double alpha = 0;
  double error_before = 0;  // the score of s = 1 (relative: divided by sum tr(W H W^T))
  double error_after = 0;   // the score of s
};

// h [n_in][n_in] symmetric. Matrices whose n_in is not a multiple of their type's block size are not
// scored (they stay float). tie (empty, or [n_in] in [0, n_in)): channels with equal tie[j] get one scale, from their
// pooled RMS (where a fold must scale them alike).
AwqScales awq_search(std::span<const AwqMatrix> ms, int64_t n_in, const float* h, const AwqOptions& options,
                     ThreadPool& pool, std::span<const int64_t> tie = {});

// AWQ's clipping search, for the final rounding of a scaled row: each group of 32 weights is clipped to a
// shrinking fraction of its range (1, 0.975, ..., 0.5) and fitted by the importance-weighted search
// (fit_group_weighted); the clip kept is the one with the least output error of the group, d^T H_gg d
// (d: fitted - unclipped weights, H_gg the inputs' Hessian on the group). The row is then quantized from
// the clipped weights, and each block kept from the unclipped ones where those give it less output error
// (the group fits approximate the K-quants' stored sub-block scales), so clipping never costs a block.
// row in `type` <- x[n]; h_groups [n / 32][32][32] the diagonal blocks of H; importance [n].
void awq_clip_quantize_row(DType type, const float* x, void* row, size_t n, const float* h_groups, const float* importance);

// The diagonal 32 x 32 blocks of h [n][n] (n a multiple of 32) after the inputs are divided by s:
// [n / 32][32][32], h_ab / (s_a s_b).
std::vector<float> awq_group_hessians(const float* h, int64_t n, const std::vector<float>& s);

}  // namespace kestrel
