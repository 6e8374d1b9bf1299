#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kestrel::layers {
namespace {
const float* floats(const TensorView* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }
}  // namespace

void attention(ThreadPool& pool, const HParams& hp, const ArchTraits& arch, const LayerWeights& L,
               const TensorView* rope_freqs, const ForwardBatch& batch, const KvLayerView& kv, const float* h,
               float* out) {
  const int n_tok = batch.n_tokens();
  const int hd = hp.head_dim, Dq = hp.n_heads * hd, Dkv = hp.n_kv_heads * hd;
  std::vector<float> q(static_cast<size_t>(n_tok) * Dq);     // [n_tok, n_heads, head_dim]
  std::vector<float> k(static_cast<size_t>(n_tok) * Dkv);    // [n_tok, n_kv_heads, head_dim]
  std::vector<float> v(static_cast<size_t>(n_tok) * Dkv);    // [n_tok, n_kv_heads, head_dim]
  std::vector<float> attn(static_cast<size_t>(n_tok) * Dq);  // [n_tok, n_heads, head_dim]
  ops::matmul(pool, WeightMatrix::from(*L.wq), h, q.data(), n_tok);
  ops::matmul(pool, WeightMatrix::from(*L.wk), h, k.data(), n_tok);
  ops::matmul(pool, WeightMatrix::from(*L.wv), h, v.data(), n_tok);
  if (L.bq) {
    ops::add_bias(q.data(), floats(L.bq), n_tok, Dq);
    ops::add_bias(k.data(), floats(L.bk), n_tok, Dkv);
    ops::add_bias(v.data(), floats(L.bv), n_tok, Dkv);
  }
  if (L.q_norm) {  // per head: rows of head_dim
    ops::rmsnorm(q.data(), floats(L.q_norm), q.data(), n_tok * hp.n_heads, hd, hp.rms_eps);
    ops::rmsnorm(k.data(), floats(L.k_norm), k.data(), n_tok * hp.n_kv_heads, hd, hp.rms_eps);
  }
  ops::rope(q.data(), batch.positions, hp.n_heads, hd, hp.n_rot, hp.rope_freq_base, arch.rope_style,
            floats(rope_freqs));
  ops::rope(k.data(), batch.positions, hp.n_kv_heads, hd, hp.n_rot, hp.rope_freq_base, arch.rope_style,
            floats(rope_freqs));
  const AttentionRows rows{batch.positions, batch.block_tables};
  ops::kv_store(kv, rows, k.data(), v.data(), n_tok);
  ops::attention_paged(pool, q.data(), kv, rows, attn.data(), n_tok, hp.n_heads, 1.0f / std::sqrt(float(hd)));
  ops::matmul(pool, WeightMatrix::from(*L.wo), attn.data(), out, n_tok);
}

void ffn_dense(ThreadPool& pool, const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
               const float* h, float* out, int n_tok) {
  const size_t n = static_cast<size_t>(n_tok) * static_cast<size_t>(gate.n_out);
  std::vector<float> g(n), u(n);  // [n_tok, n_ff]
  ops::matmul(pool, gate, h, g.data(), n_tok);
  ops::matmul(pool, up, h, u.data(), n_tok);
  ops::silu_mul(g.data(), u.data(), n);
  ops::matmul(pool, down, g.data(), out, n_tok);
}

void ffn_moe(ThreadPool& pool, const HParams& hp, const ArchTraits& arch, const LayerWeights& L, const float* h,
             float* out, int n_tok) {
  const int E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used;
  std::vector<float> probs(static_cast<size_t>(n_tok) * X);  // [n_tok, n_expert]
  ops::matmul(pool, WeightMatrix::from(*L.ffn_router), h, probs.data(), n_tok);
  // Route: per token, the top-k experts and their weights.
  std::vector<std::vector<std::pair<int, float>>> routed(static_cast<size_t>(X));  // expert -> (token, weight)
  std::vector<int> order(static_cast<size_t>(X));
  for (int t = 0; t < n_tok; ++t) {
    float* p = probs.data() + static_cast<size_t>(t) * X;
    ops::softmax(p, X);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int j = 0; j < K; ++j) sum += p[order[j]];
    for (int j = 0; j < K; ++j)
      routed[static_cast<size_t>(order[j])].push_back({t, arch.moe_norm_topk ? p[order[j]] / sum : p[order[j]]});
  }
  std::fill(out, out + static_cast<size_t>(n_tok) * E, 0.f);
  std::vector<float> xs, ys;  // [n_routed, n_embd] gathered inputs and expert outputs
  for (int e = 0; e < X; ++e) {
    const auto& tokens = routed[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    const int n = static_cast<int>(tokens.size());
    xs.resize(static_cast<size_t>(n) * E);
    ys.resize(static_cast<size_t>(n) * E);
    for (int i = 0; i < n; ++i)
      std::copy_n(h + static_cast<size_t>(tokens[i].first) * E, E, xs.data() + static_cast<size_t>(i) * E);
    ffn_dense(pool, WeightMatrix::from(*L.ffn_gate_exps, e), WeightMatrix::from(*L.ffn_up_exps, e),
              WeightMatrix::from(*L.ffn_down_exps, e), xs.data(), ys.data(), n);
    for (int i = 0; i < n; ++i) {
      float* o = out + static_cast<size_t>(tokens[i].first) * E;
      const float* y = ys.data() + static_cast<size_t>(i) * E;
      for (int d = 0; d < E; ++d) o[d] += tokens[i].second * y[d];
    }
  }
}

}  // namespace kestrel::layers
