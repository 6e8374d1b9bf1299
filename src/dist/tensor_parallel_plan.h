// How a model's attention heads, FFN channels and output vocabulary split over tensor-parallel ranks
// (DESIGN.md: dist/ shard plans). Pure integer arithmetic over the model's shape, so every rank computes the
// same plan on its own and a test can check it without a model.
//
// Each rank takes a contiguous run of query heads with the KV heads they read: Q, K, V (and gate, up) are
// split by output rows (column-parallel), attn_output and ffn_down by input columns (row-parallel, one
// all-reduce each), the output matrix by vocabulary rows (gathered). With fewer KV heads than ranks, each
// KV head is replicated on the ranks whose query heads read it.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

// The shape the plan needs, per layer and overall.
struct TpModelShape {
  struct Layer {
    int n_heads = 0;     // query heads, a multiple of n_kv_heads
    int n_kv_heads = 0;
    int n_ff = 0;        // dense FFN channels
  };
  std::vector<Layer> layers;  // [n_layers]
  int head_dim_v = 0;         // value width per head: attn_output's input columns per head
  int n_vocab = 0;
  // Input columns a row-parallel split may cut at: the block width of attn_output's and ffn_down's rows
  // (32 for Q8_0 / Q4_0 ..., 256 for K-quants, 1 for float types).
  int attn_output_granule = 1;
  int ffn_down_granule = 1;
};

// One rank's share of one layer: [begin, begin + n) of each.
struct TpLayerShard {
  int head_begin = 0, n_heads = 0;
  int kv_head_begin = 0, n_kv_heads = 0;
  int ff_begin = 0, n_ff = 0;
  // The rank's heads end inside one of attn_output's column blocks (K-quants' 256 columns over narrow
  // heads): it multiplies the whole matrix, with zeros where other ranks' heads go, instead of a slice.
  bool attn_output_whole = false;
  // Fewer of ffn_down's column blocks than ranks: the channels split one by one, and each rank multiplies
  // the whole ffn_down with zeros for the others' channels.
  bool ffn_down_whole = false;
};

struct TpShard {
  int rank = 0, n_ranks = 1;
  std::vector<TpLayerShard> layers;  // [n_layers]
  int vocab_begin = 0, n_vocab = 0;  // output rows this rank computes
  std::vector<int> vocab_offsets;    // [n_ranks + 1]: rank k computes rows [vocab_offsets[k], vocab_offsets[k + 1])
};

// Rank `rank`'s share of `shape` over n_ranks. Errors name the layer and the numbers that do not split:
// query heads not a multiple of n_ranks; KV heads neither a multiple nor a divisor of n_ranks; fewer FFN
// channels than ranks.
Result<TpShard> plan_tensor_parallel(const TpModelShape& shape, int n_ranks, int rank);

}  // namespace kestrel
