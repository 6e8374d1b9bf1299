// Structured pruning (`kestrel prune --structured`): removes whole KV groups, query heads and FFN channels
// and writes an ordinary dense GGUF whose layers may differ in head_count, head_count_kv and
// feed_forward_length (per-layer arrays, as GGUF allows; scalars where every layer agrees).
//
// Importance of a unit is the energy it adds to the residual stream: for FFN channel j of a layer,
//   E[h_j^2] * ||W_down[:, j]||^2   (h_j the channel's activation, ffn_down's input j),
// for query head h the same summed over its head_dim channels of attn_output's input, and for a KV group
// the sum over its query heads. E[x^2] is the calibration's mean square (the importance matrix); without
// calibration every channel weighs 1 (weight norms only). Removed: attn_q rows (and bias) of dropped heads,
// attn_k / attn_v rows of dropped KV groups, attn_output columns of dropped heads; ffn_gate / ffn_up rows
// and ffn_down columns of dropped channels. Expert FFNs and latent attention are not pruned this way.
#pragma once
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "model/hparams.h"
#include "model/model_pruner.h"
#include "quant/importance_matrix.h"
#include "quant/structured_prune.h"

namespace kestrel {

// What one layer keeps: original indices, ascending.
struct LayerKeep {
  std::vector<int> heads;     // query heads
  std::vector<int> kv_heads;  // KV heads (each kept query head's KV head is kept)
  std::vector<int> ffn;       // FFN channels (empty for a layer without a dense FFN)
};

// Chooses what every layer keeps. importance: the calibration's (null: equal weights).
// Errors: latent attention, a matrix that is not where or what the shapes say.
Result<std::vector<LayerKeep>> plan_structured(const GgufFile& file, const HParams& hp, const StructuredSpec& spec,
                                               const ImportanceMatrix* importance, ThreadPool& pool);

// Writes options.output with the plan applied (prune_model's structured path; options.structured set).
// Sliced matrices are reported as pruned: `sparsity` is the fraction of their weights removed, rel_error and
// rel_output_error the root of the removed share of their energy, unweighted and weighted by the input mean
// squares. The totals count every block matrix (pruned_weights) and the weights removed (zero_weights).
Result<PruneReport> write_structured(const PruneOptions& options, const GgufFile& in, const HParams& hp,
                                     const std::vector<LayerKeep>& keep, ThreadPool& pool,
                                     const std::function<void(double)>& progress);

}  // namespace kestrel
