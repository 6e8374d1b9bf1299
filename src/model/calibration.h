// Calibration: runs a model over calibration text and measures, for every weight matrix, how large each
// input channel's activations are: the mean of x_j^2 over the tokens that reached the matrix (the measure
// of llama.cpp's importance matrix) and the largest |x_j| (SmoothQuant's and W8A8's activation ranges).
// Quantizers weight each weight's error by the first (quant/importance_quantize.h): an error on a channel
// that carries large inputs moves the product more.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "quant/importance_matrix.h"

namespace kestrel {

// The input Hessian H = X^T X / n of every weight matrix: X [n tokens][n_in] the rows that reached it. GPTQ
// (quant/gptq.h) compensates rounding errors through H^-1; its diagonal is the importance above.
struct HessianSet {
  struct Hessian {
    int64_t n_in = 0;
    int64_t tokens = 0;
    std::vector<float> h;  // [n_in][n_in] symmetric
  };
  // By tensor name, one per slice; matrices that take the same input (q, k and v; gate and up) share one.
  std::map<std::string, std::vector<std::shared_ptr<const Hessian>>> tensors;

  // The Hessian of slice `slice` of tensor `name`, or null when no token reached it.
  const Hessian* find(const std::string& name, int64_t slice) const;
  // Bytes the distinct Hessians take.
  size_t bytes() const;
};

// Runs each chunk (token ids, a sequence from position 0) through the model, every position's logits
// included so the output matrix is measured too. progress(fraction of chunks done) may be empty.
// Error: a token id outside the vocabulary, or no tokens at all.
Result<ImportanceMatrix> collect_importance(const Model& model, ThreadPool& pool,
                                            const std::vector<std::vector<int32_t>>& chunks,
                                            const std::function<void(double)>& progress = {});

// The importance matrix the Hessians imply (each one's diagonal), for the tensors GPTQ does not handle.
ImportanceMatrix importance_from_hessians(const HessianSet& hessians);

// Runs the chunks as collect_importance does and accumulates every matrix input's Hessian (n_in^2 floats
// per distinct input: HessianSet::bytes tells what it took).
Result<HessianSet> collect_hessians(const Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& chunks,
                                    const std::function<void(double)>& progress = {});

}  // namespace kestrel
