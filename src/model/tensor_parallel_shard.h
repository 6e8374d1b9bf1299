// One tensor-parallel rank's share of a loaded model's weights (dist/tensor_parallel_plan.h): Q, K, V,
// their biases, gate and up keep the rank's rows (views into the file: contiguous), attn_output and
// ffn_down the rank's input columns (copied; attn_output whole where the rank's heads end inside one of its
// blocks, LayerShape::wo_heads), the output matrix the rank's vocabulary rows; norms and the embeddings are
// whole on every rank. The rank's hyperparameters are the model's with per-layer shapes of
// its heads, KV heads and FFN channels, so attention, the KV cache and packing need nothing new.
#pragma once
#include <deque>
#include <memory>
#include <vector>

#include "core/status.h"
#include "dist/tensor_parallel_plan.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace kestrel {

struct TensorParallelShard {
  TpShard plan;
  // The rank's hyperparameters (layer_shapes from the plan, maxima over them; n_vocab unchanged) and weights
  // (views into the file, or into `copies`): the model takes both over when it loads the shard.
  HParams hparams;
  ModelWeights weights;
  std::deque<TensorView> views;                    // the sliced tensors `weights` points at
  std::vector<std::shared_ptr<uint8_t[]>> copies;  // [n_bytes] of each column-sliced matrix
};

// Rank `rank` of n_ranks, holding weights for layers [layer_begin, layer_end) only (a pipeline stage's; the
// other layers keep their split shapes and no weights). Fails for what tensor parallelism does not split
// yet (latent attention, mixtures of experts, int8 W8A8 matrices) and for shapes the plan rejects, naming
// them.
Result<std::unique_ptr<TensorParallelShard>> shard_for_tensor_parallel(const ModelWeights& weights, const HParams& hp,
                                                                       const ArchTraits& arch, int n_ranks, int rank,
                                                                       int layer_begin, int layer_end);

}  // namespace kestrel
