// Writes a pruned model file (`kestrel prune`): the matrices of the transformer blocks (blk.N.*: attention
// and FFN projections, experts slice by slice; not norms, not the MoE router) are pruned by quant/prune.h
// from their float rows, then written in their own type, a 2:4 sparse type, or the types of a quantization
// scheme; everything else (embeddings, output matrix, norms, metadata) is copied. The file says how it
// was pruned in kestrel.pruning.* keys.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "quant/importance_matrix.h"
#include "quant/prune.h"
#include "quant/recipe.h"
#include "quant/structured_prune.h"

namespace kestrel {

struct PruneOptions {
  std::string input, output;
  PruneSpec spec;
  // Set: remove whole heads and FFN channels instead (model/structured_pruner.h; `spec` then only says
  // whether the calibration's activations weigh in: Wanda does, magnitude scores weights alone).
  std::optional<StructuredSpec> structured;
  // The written types: a scheme's (quant/recipe.h; its 2:4 schemes store 2:4 pruned matrices in half the
  // bytes), or nullopt: every tensor keeps its type, except that 2:4 pruned matrices whose rows split into
  // 64 are written as S24_F16.
  std::optional<QuantScheme> scheme;
  // The calibration's importance (mean square of each input channel): Wanda's input norms (their roots),
  // and importance-weighted rounding where the scheme quantizes. Required for Wanda; a matrix it has no
  // entry for (an expert no calibration token reached) is pruned by magnitude within each row.
  const ImportanceMatrix* importance = nullptr;
};

// One tensor of the written file.
struct TensorPruneReport {
  std::string name;
  std::string shape;
  DType from, to;
  size_t bytes_in = 0, bytes_out = 0;
  bool pruned = false;
  bool by_activations = false;   // pruned with the calibration's input norms (Wanda)
  double sparsity = 0.0;         // fraction of the written weights that are zero
  double rel_error = 0.0;        // RMS of (written - source) / RMS of source
  double rel_output_error = -1;  // the same with each input channel weighted by its mean square activation
                                 // (the error of the layer's output); < 0 without calibration
};

struct PruneReport {
  std::vector<TensorPruneReport> tensors;  // in file order
  size_t bytes_in = 0, bytes_out = 0;      // tensor data
  int64_t pruned_weights = 0;              // weights of the pruned matrices
  int64_t zero_weights = 0;                // of those, zero in the written file
};

// The type `kestrel prune` writes tensor t in (nullopt: copied as it is): with a scheme, the scheme's type;
// without one, pruned matrices keep theirs (2:4 ones whose rows split into 64 become S24_F16).
std::optional<DType> pruned_tensor_type(const PruneOptions& options, const TensorView& t, bool pruned, const QuantModelFacts& facts);

// Whether `kestrel prune` prunes the tensor `name` with dims (ggml order: dims[0] is the row length).
bool is_prunable_matrix(const std::string& name, const std::vector<int64_t>& dims);

// Writes w's file (the tensors declared in `in`'s order, report.tensors alike) to options.output: tensors the
// report marks pruned through prune_tensor(index, bytes to fill, their report entry), which returns how many
// weights count towards report.pruned_weights (its `sparsity` share of the tensor adds to zero_weights); the
// others converted to their report's `to` type, or copied. Removes the output on failure.
using PruneTensor = std::function<int64_t(size_t index, std::vector<uint8_t>& bytes, TensorPruneReport& r)>;
Result<PruneReport> write_pruned_file(const GgufWriter& w, const GgufFile& in, const PruneOptions& options, PruneReport report,
                                      ThreadPool& pool, const std::function<void(double)>& progress, const PruneTensor& prune_tensor);

// Errors: the input cannot be read, Wanda without importance, a pruned matrix that is not F32, F16 or BF16
// (start from a float file), 2:4 on rows that do not split into groups of 4, a 2:4 scheme (S24_*) without the
// 2:4 pattern, or an unwritable output.
// progress(fraction of the input's tensor bytes done) may be empty.
Result<PruneReport> prune_model(const PruneOptions& options, ThreadPool& pool, const std::function<void(double)>& progress = {});

}  // namespace kestrel
