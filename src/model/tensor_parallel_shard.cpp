#include "model/tensor_parallel_shard.h"

#include <algorithm>
#include <cstring>

#include "core/large_buffer.h"

namespace kestrel {
namespace {

// Inputs per block of t's rows (1 for plain floats): where a column slice may cut.
int column_granule(const TensorView& t) { return static_cast<int>(dtype_traits(t.type).block_elems); }

// Rows [begin, begin + n) of t (a matrix, or elements of a vector): a view into the same bytes.
const TensorView* row_slice(TensorParallelShard& s, const TensorView* t, int64_t begin, int64_t n) {
  if (!t) return nullptr;
  TensorView v = *t;
  if (t->n_dims == 1) {  // a bias: elements
    v.ne[0] = n;
    v.data = t->data + static_cast<size_t>(begin) * sizeof(float);
    v.n_bytes = static_cast<size_t>(n) * sizeof(float);
  } else {
    v.ne[1] = n;
    v.data = t->row(begin);
    v.n_bytes = static_cast<size_t>(n) * t->row_bytes();
  }
  s.views.push_back(v);
  return &s.views.back();
}

// Input columns [begin, begin + n) of every row of matrix t, copied (begin and n whole blocks).
const TensorView* column_slice(TensorParallelShard& s, const TensorView* t, int64_t begin, int64_t n) {
  TensorView v = *t;
  v.ne[0] = n;
  const size_t from = row_bytes(t->type, static_cast<size_t>(begin)), width = v.row_bytes();
  v.n_bytes = width * static_cast<size_t>(t->n_rows());
  std::shared_ptr<uint8_t[]> bytes = allocate_large_buffer(v.n_bytes);  // [n_rows][width]
  for (int64_t r = 0; r < t->n_rows(); ++r) std::memcpy(bytes.get() + static_cast<size_t>(r) * width, t->row(r) + from, width);
  v.data = bytes.get();
  s.copies.push_back(std::move(bytes));
  s.views.push_back(v);
  return &s.views.back();
}

}  // namespace

Result<std::unique_ptr<TensorParallelShard>> shard_for_tensor_parallel(const ModelWeights& weights, const HParams& hp,
                                                                       const ArchTraits& arch, int n_ranks, int rank,
                                                                       int layer_begin, int layer_end) {
  if (arch.latent_attention) return Error{"tensor parallelism does not split latent attention (MLA) models yet"};
  if (hp.n_expert > 0) return Error{"tensor parallelism does not split mixture-of-experts models yet (expert parallelism: --ep)"};
  if (!weights.int8.empty()) return Error{"tensor parallelism does not split int8 (W8A8) matrices yet"};
  TpModelShape shape;
  for (const LayerShape& l : hp.layer_shapes) shape.layers.push_back({l.n_heads, l.n_kv_heads, l.n_ff});
  shape.head_dim_v = hp.head_dim;
  shape.n_vocab = static_cast<int>(weights.output->ne[1]);
  for (const LayerWeights& L : weights.layers) {
    shape.attn_output_granule = std::max(shape.attn_output_granule, column_granule(*L.wo));
    shape.ffn_down_granule = std::max(shape.ffn_down_granule, column_granule(*L.ffn_down));
  }
  auto plan = plan_tensor_parallel(shape, n_ranks, rank);
  if (!plan.ok()) return Error{plan.error()};

  auto s = std::make_unique<TensorParallelShard>();
  s->plan = std::move(plan).value();
  s->hparams = hp;
  s->hparams.n_heads = s->hparams.n_kv_heads = s->hparams.n_ff = 0;
  s->weights = weights;
  const int64_t hd = hp.head_dim;
  for (size_t il = 0; il < weights.layers.size(); ++il) {
    const TpLayerShard& p = s->plan.layers[il];
    LayerShape& shape_il = s->hparams.layer_shapes[il];
    const LayerShape whole = shape_il;
    shape_il = {p.n_heads, p.n_kv_heads, p.n_ff};
    if (p.attn_output_whole) shape_il.wo_heads = whole.n_heads, shape_il.wo_head_begin = p.head_begin;
    if (p.ffn_down_whole) shape_il.down_channels = whole.n_ff, shape_il.down_channel_begin = p.ff_begin;
    s->hparams.n_heads = std::max(s->hparams.n_heads, p.n_heads);
    s->hparams.n_kv_heads = std::max(s->hparams.n_kv_heads, p.n_kv_heads);
    s->hparams.n_ff = std::max(s->hparams.n_ff, p.n_ff);
    LayerWeights& L = s->weights.layers[il];
    if (static_cast<int>(il) < layer_begin || static_cast<int>(il) >= layer_end) {
      L = LayerWeights{};  // another pipeline stage's layer
      continue;
    }
    const int64_t q0 = p.head_begin * hd, nq = p.n_heads * hd, kv0 = p.kv_head_begin * hd, nkv = p.n_kv_heads * hd;
    L.wq = row_slice(*s, L.wq, q0, nq);
    L.bq = row_slice(*s, L.bq, q0, nq);
    L.wk = row_slice(*s, L.wk, kv0, nkv);
    L.bk = row_slice(*s, L.bk, kv0, nkv);
    L.wv = row_slice(*s, L.wv, kv0, nkv);
    L.bv = row_slice(*s, L.bv, kv0, nkv);
    if (!p.attn_output_whole) L.wo = column_slice(*s, L.wo, q0, nq);
    L.ffn_gate = row_slice(*s, L.ffn_gate, p.ff_begin, p.n_ff);
    L.ffn_up = row_slice(*s, L.ffn_up, p.ff_begin, p.n_ff);
    if (!p.ffn_down_whole) L.ffn_down = column_slice(*s, L.ffn_down, p.ff_begin, p.n_ff);
  }
  s->weights.output = row_slice(*s, weights.output, s->plan.vocab_begin, s->plan.n_vocab);
  return s;
}

}  // namespace kestrel
