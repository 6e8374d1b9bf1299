// Calibration: runs a model over calibration text and measures, for every weight matrix, how large each
// input channel's activations are: the mean of x_j^2 over the tokens that reached the matrix (the measure
// of llama.cpp's importance matrix). Quantizers weight each weight's error by it (quant/
// importance_quantize.h): an error on a channel that carries large inputs moves the product more.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace kestrel {

struct ImportanceMatrix {
  struct Entry {
    int64_t n_in = 0;
    int64_t n_slices = 1;                // experts (or heads) of a 3-D tensor, else 1
    std::vector<float> mean_square;      // [n_slices][n_in]
    std::vector<int64_t> tokens;         // [n_slices] how many rows each slice saw
  };
  std::map<std::string, Entry> tensors;  // by tensor name; only matrices some token reached

  // The importance of slice `slice` of tensor `name` ([n_in]), or null when it has none (never reached,
  // e.g. token_embd, which is looked up, not multiplied).
  const float* find(const std::string& name, int64_t slice) const;
};

// Runs each chunk (token ids, a sequence from position 0) through the model, every position's logits
// included so the output matrix is measured too. progress(fraction of chunks done) may be empty.
// Error: a token id outside the vocabulary, or no tokens at all.
Result<ImportanceMatrix> collect_importance(const Model& model, ThreadPool& pool,
                                            const std::vector<std::vector<int32_t>>& chunks,
                                            const std::function<void(double)>& progress = {});

}  // namespace kestrel
