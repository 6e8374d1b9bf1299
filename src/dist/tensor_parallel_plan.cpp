#include "dist/tensor_parallel_plan.h"

namespace kestrel {
namespace {

// [begin, begin + n) of n_units split over n_parts as evenly as possible (the first parts one larger).
void even_share(int n_units, int n_parts, int part, int& begin, int& n) {
  const int base = n_units / n_parts, extra = n_units % n_parts;
  begin = part * base + (part < extra ? part : extra);
  n = base + (part < extra ? 1 : 0);
}

std::string at_layer(int il) { return "layer " + std::to_string(il) + ": "; }

}  // namespace

Result<TpShard> plan_tensor_parallel(const TpModelShape& shape, int n_ranks, int rank) {
  if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
    return Error{"tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(n_ranks)};
  if (shape.attn_output_granule < 1 || shape.ffn_down_granule < 1 || shape.head_dim_v < 1)
    return Error{"tensor parallel: granules and head width must be positive"};
  TpShard shard;
  shard.rank = rank;
  shard.n_ranks = n_ranks;
  for (size_t i = 0; i < shape.layers.size(); ++i) {
    const auto& l = shape.layers[i];
    const int il = static_cast<int>(i);
    if (l.n_heads % n_ranks != 0)
      return Error{at_layer(il) + std::to_string(l.n_heads) + " attention heads do not split over " + std::to_string(n_ranks) +
                   " tensor-parallel ranks (need a multiple of " + std::to_string(n_ranks) + ")"};
    if (l.n_kv_heads < 1 || l.n_heads % l.n_kv_heads != 0)
      return Error{at_layer(il) + std::to_string(l.n_heads) + " heads are not a multiple of " + std::to_string(l.n_kv_heads) + " KV heads"};
    TpLayerShard s;
    s.n_heads = l.n_heads / n_ranks;
    s.head_begin = rank * s.n_heads;
    const int group = l.n_heads / l.n_kv_heads;  // query heads per KV head
    if (l.n_kv_heads % n_ranks == 0) {
      s.n_kv_heads = l.n_kv_heads / n_ranks;
      s.kv_head_begin = rank * s.n_kv_heads;
    } else if (n_ranks % l.n_kv_heads == 0) {  // replicated: this rank's query heads all read one KV head
      s.n_kv_heads = 1;
      s.kv_head_begin = s.head_begin / group;
    } else {
      return Error{at_layer(il) + std::to_string(l.n_kv_heads) + " KV heads do not split over " + std::to_string(n_ranks) +
                   " tensor-parallel ranks (need a multiple or a divisor of " + std::to_string(n_ranks) + ")"};
    }
    s.attn_output_whole = (static_cast<long>(s.n_heads) * shape.head_dim_v) % shape.attn_output_granule != 0;
    if (l.n_ff < n_ranks)
      return Error{at_layer(il) + std::to_string(l.n_ff) + " FFN channels do not split over " + std::to_string(n_ranks) + " ranks"};
    s.ffn_down_whole = l.n_ff % shape.ffn_down_granule != 0 || l.n_ff / shape.ffn_down_granule < n_ranks;
    const int granule = s.ffn_down_whole ? 1 : shape.ffn_down_granule;
    int unit_begin = 0, n_units = 0;
    even_share(l.n_ff / granule, n_ranks, rank, unit_begin, n_units);
    s.ff_begin = unit_begin * granule;
    s.n_ff = n_units * granule;
    shard.layers.push_back(s);
  }
  if (shape.n_vocab < n_ranks)
    return Error{"a vocabulary of " + std::to_string(shape.n_vocab) + " does not split over " + std::to_string(n_ranks) + " ranks"};
  for (int k = 0; k <= n_ranks; ++k) {
    int begin = shape.n_vocab, n = 0;
    if (k < n_ranks) even_share(shape.n_vocab, n_ranks, k, begin, n);
    shard.vocab_offsets.push_back(begin);
  }
  shard.vocab_begin = shard.vocab_offsets[static_cast<size_t>(rank)];
  shard.n_vocab = shard.vocab_offsets[static_cast<size_t>(rank) + 1] - shard.vocab_begin;
  return shard;
}

}  // namespace kestrel
