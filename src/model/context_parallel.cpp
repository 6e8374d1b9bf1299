// Model::forward_context_parallel (model/context_parallel.h).
#include "model/context_parallel.h"

#include <algorithm>
#include <vector>

#include "model/layers.h"
#include "model/model.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

// Rows [begin, end) of a RoPE table.
ops::RopeTable rope_rows(const ops::RopeTable& all, int begin, int end) {
  const size_t half = static_cast<size_t>(all.n_rot / 2);
  ops::RopeTable part{all.n_rot, {}, {}};
  part.cos.assign(all.cos.begin() + begin * half, all.cos.begin() + end * half);
  part.sin.assign(all.sin.begin() + begin * half, all.sin.begin() + end * half);
  return part;
}

// One layer's ring: this rank's K/V rows travel C - 1 hops; every slice that arrives is stored into kv at
// its tokens' positions (K rotated as it is stored). k, v: [n_loc, n_kv_heads, head_dim] this rank's rows.
void pass_kv_around_ring(Communicator& ring, const ModelInput& batch, const ops::RopeTable& rope, RopeStyle style,
                         const KvLayerView& kv, const float* k, const float* v, int n_tok) {
  const int C = ring.size(), r = ring.rank();
  const size_t row = static_cast<size_t>(kv.n_kv_heads) * kv.k_dim;  // floats of one token's K (and of its V)
  int widest = 0;
  for (int j = 0; j < C; ++j) {
    const auto [b, e] = context_slice(n_tok, C, j);
    widest = std::max(widest, e - b);
  }
  const size_t slot = 2 * static_cast<size_t>(widest) * row;
  std::vector<float> send(slot), recv(slot);  // [K rows of widest tokens | V rows] of one slice
  const auto [b0, e0] = context_slice(n_tok, C, r);
  std::copy_n(k, static_cast<size_t>(e0 - b0) * row, send.data());
  std::copy_n(v, static_cast<size_t>(e0 - b0) * row, send.data() + slot / 2);
  for (int hop = 1; hop < C; ++hop) {
    ring.send_recv(send.data(), slot * sizeof(float), (r + 1) % C, recv.data(), slot * sizeof(float), (r + C - 1) % C);
    const int owner = (r - hop + C) % C;
    const auto [b, e] = context_slice(n_tok, C, owner);
    const ops::RopeTable owner_rope = rope_rows(rope, b, e);
    const AttentionRows rows{batch.positions.subspan(b, e - b), batch.block_tables.subspan(b, e - b)};
    ops::kv_store(kv, rows, ops::KvWrite{recv.data(), recv.data() + slot / 2, &owner_rope, style}, e - b);
    std::swap(send, recv);  // forward what arrived
  }
}

}  // namespace

std::pair<int, int> context_slice(int n_tok, int n_ranks, int rank) {
  return {static_cast<int>(static_cast<int64_t>(rank) * n_tok / n_ranks),
          static_cast<int>(static_cast<int64_t>(rank + 1) * n_tok / n_ranks)};
}

void Model::forward_context_parallel(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits,
                                     ForwardWorkspace& ws) const {
  using Buffer = ForwardWorkspace::Buffer;
  const HParams& hp = hparams_;
  const int n_tok = batch.n_tokens(), E = hp.n_embd, C = cp_->size();
  const auto [b0, e0] = context_slice(n_tok, C, cp_->rank());
  const int n_loc = e0 - b0;
  const ModelInput local{batch.tokens.subspan(b0, n_loc), batch.positions.subspan(b0, n_loc),
                         batch.block_tables.subspan(b0, n_loc), {}};
  const size_t n_act = static_cast<size_t>(n_loc) * E;
  float* x = ws.get(Buffer::Residual, n_act);  // [n_loc, n_embd] this slice's residual stream
  embed(local, x);
  const TensorView* freq_factors = weights_.rope_freqs;
  const ops::RopeTable rope = ops::rope_table(batch.positions, hp.n_rot, hp.rope_freq_base,
                                              freq_factors ? reinterpret_cast<const float*>(freq_factors->data) : nullptr);
  const ops::RopeTable local_rope = rope_rows(rope, b0, e0);
  for (int il = 0; il < hp.n_layers; ++il) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(il)];
    const KvLayerView layer_kv = kv.layer(il);
    const layers::KvRowsHook ring = [&](const float* k, const float* v) {
      pass_kv_around_ring(*cp_, batch, rope, arch_->rope_style, layer_kv, k, v, n_tok);
    };
    const ops::MatmulInput attn_in{x, reinterpret_cast<const float*>(L.attn_norm->data), hp.rms_eps};
    layers::attention(pool, packed_, hp, hp.layer(il), *arch_, L, local_rope, local, layer_kv, attn_in, x, ws, ring);
    ffn(pool, il, x, n_loc, ws);
  }
  // The wanted rows this slice holds, then every rank's summed: [n_out, n_vocab], zeros but for its rows.
  const int n_out = static_cast<int>(batch.logits_rows.size());
  const size_t n_vocab = static_cast<size_t>(hp.n_vocab);
  std::vector<int> mine;           // indices into logits_rows
  std::vector<int32_t> mine_rows;  // [mine] their rows in this slice
  for (int i = 0; i < n_out; ++i)
    if (batch.logits_rows[i] >= b0 && batch.logits_rows[i] < e0) {
      mine.push_back(i);
      mine_rows.push_back(batch.logits_rows[i] - b0);
    }
  std::fill_n(logits, static_cast<size_t>(n_out) * n_vocab, 0.f);
  const int m = static_cast<int>(mine.size());
  float* rows = ws.get(Buffer::Logits, static_cast<size_t>(m) * n_vocab);  // [m, n_vocab]
  project_logits(pool, {local.tokens, local.positions, local.block_tables, mine_rows}, x, rows, ws);
  for (int i = 0; i < m; ++i)
    std::copy_n(rows + static_cast<size_t>(i) * n_vocab, n_vocab, logits + static_cast<size_t>(mine[i]) * n_vocab);
  cp_->all_reduce_sum(logits, static_cast<size_t>(n_out) * n_vocab);
}

}  // namespace kestrel
