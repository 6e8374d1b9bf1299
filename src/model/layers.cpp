#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "model/activation_observer.h"

namespace kestrel::layers {
namespace {
const float* floats(const TensorView* t) { return t ? reinterpret_cast<const float*>(t->data) : nullptr; }

// The calibration hook (ws.observer): x [n_tok, w.n_in] as w is about to multiply it.
void observe(ForwardWorkspace& ws, const WeightMatrix& w, const float* x, int n_tok) {
  if (ws.observer) ws.observer->observe(std::span<const WeightMatrix>(&w, 1), x, n_tok);
}

// The same for matrices sharing one input whose norm the GEMM folds in: the rows after the norm.
void observe(ForwardWorkspace& ws, std::span<const WeightMatrix> ms, const ops::MatmulInput& in, int n_tok) {
  if (!ws.observer || ms.empty()) return;
  const int n_in = static_cast<int>(ms[0].n_in);
  std::vector<float> normed;  // [n_tok, n_in]
  const float* x = in.x;
  if (in.norm_weight) {
    normed.resize(static_cast<size_t>(n_tok) * n_in);
    ops::rmsnorm(in.x, in.norm_weight, normed.data(), n_tok, n_in, in.norm_eps);
    x = normed.data();
  }
  ws.observer->observe(ms, x, n_tok);
}

// matmul, seen by the calibration hook first.
void matmul(ThreadPool& pool, ForwardWorkspace& ws, const WeightMatrix& w, const float* x, float* y, int n_tok,
            ops::Accumulate accumulate = ops::Accumulate::No) {
  observe(ws, w, x, n_tok);
  ops::matmul(pool, w, x, y, n_tok, accumulate);
}

// wide[n_tok, n_wide] <- rows[n_tok, n] at columns [begin, begin + n), zeros elsewhere; returns wide. For a
// tensor-parallel rank that multiplies a whole row-parallel matrix (LayerShape::wo_heads, down_channels).
float* widen_rows(const float* rows, int n_tok, int n, int n_wide, int begin, float* wide) {
  std::fill_n(wide, static_cast<size_t>(n_tok) * n_wide, 0.f);
  for (int t = 0; t < n_tok; ++t)
    std::copy_n(rows + static_cast<size_t>(t) * n, n, wide + static_cast<size_t>(t) * n_wide + begin);
  return wide;
}
}  // namespace

void attention(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const LayerShape& shape, const ArchTraits& arch,
               const LayerWeights& L, const ops::RopeTable& rope, const ModelInput& batch, const KvLayerView& kv,
               const ops::MatmulInput& in, float* out, ForwardWorkspace& ws, const KvRowsHook& before_attending) {
  const int n_tok = batch.n_tokens();
  const int hd = hp.head_dim, Dq = shape.n_heads * hd, Dkv = shape.n_kv_heads * hd;
  using Buffer = ForwardWorkspace::Buffer;
  const size_t rows_q = static_cast<size_t>(n_tok) * Dq, rows_kv = static_cast<size_t>(n_tok) * Dkv;
  float* q = ws.get(Buffer::Q, rows_q);           // [n_tok, n_heads, head_dim]
  float* k = ws.get(Buffer::K, rows_kv);          // [n_tok, n_kv_heads, head_dim]
  float* v = ws.get(Buffer::V, rows_kv);          // [n_tok, n_kv_heads, head_dim]
  float* attn = ws.get(Buffer::AttnOut, rows_q);  // [n_tok, n_heads, head_dim]
  const WeightMatrix qkv[] = {pw.matrix(*L.wq), pw.matrix(*L.wk), pw.matrix(*L.wv)};
  float* const qkv_out[] = {q, k, v};
  observe(ws, qkv, in, n_tok);
  ops::matmul_many(pool, qkv, in, qkv_out, n_tok);
  if (L.bq) {
    ops::add_bias(q, floats(L.bq), n_tok, Dq);
    ops::add_bias(k, floats(L.bk), n_tok, Dkv);
    ops::add_bias(v, floats(L.bv), n_tok, Dkv);
  }
  if (L.q_norm) {  // per head: rows of head_dim
    ops::rmsnorm(q, floats(L.q_norm), q, n_tok * shape.n_heads, hd, hp.rms_eps);
    ops::rmsnorm(k, floats(L.k_norm), k, n_tok * shape.n_kv_heads, hd, hp.rms_eps);
  }
  ops::rope(q, rope, shape.n_heads, hd, arch.rope_style);
  if (before_attending) before_attending(k, v);
  const AttentionRows rows{batch.positions, batch.block_tables};
  const ops::KvWrite write{k, v, &rope, arch.rope_style};  // K rotated as it is written
  ops::attention_paged(pool, q, kv, rows, attn, n_tok, shape.n_heads, 1.0f / std::sqrt(float(hd)), &write);
  if (shape.wo_heads > 0)  // attn_output takes more heads than this layer has: the others' inputs are zero
    attn = widen_rows(attn, n_tok, Dq, shape.wo_heads * hd, shape.wo_head_begin * hd, ws.get(Buffer::Wide, static_cast<size_t>(n_tok) * shape.wo_heads * hd));
  matmul(pool, ws, pw.matrix(*L.wo), attn, out, n_tok, ops::Accumulate::Yes);
}

void attention_mla(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const ArchTraits& arch, const LayerWeights& L,
                   const ops::RopeTable& rope_table, const ModelInput& batch, const KvLayerView& kv, const float* h,
                   float* out, ForwardWorkspace& ws) {
  const int n_tok = batch.n_tokens(), H = hp.n_heads, hd = hp.head_dim, rope = hp.n_rot, nope = hd - rope;
  const int R = hp.kv_lora_rank, Dc = R + rope, Dv = hp.head_dim_v;
  // Queries [n_tok, H, nope + rope], from the full-rank or the low-rank (q_a -> norm -> q_b) projection.
  std::vector<float> q(static_cast<size_t>(n_tok) * H * hd);
  if (L.wq_a) {
    std::vector<float> qa(static_cast<size_t>(n_tok) * hp.q_lora_rank);  // [n_tok, q_lora_rank]
    matmul(pool, ws, pw.matrix(*L.wq_a), h, qa.data(), n_tok);
    ops::rmsnorm(qa.data(), floats(L.q_a_norm), qa.data(), n_tok, hp.q_lora_rank, hp.rms_eps);
    matmul(pool, ws, pw.matrix(*L.wq_b), qa.data(), q.data(), n_tok);
  } else {
    matmul(pool, ws, pw.matrix(*L.wq), h, q.data(), n_tok);
  }
  // Cache rows [n_tok, R + rope]: normalised latent, then the RoPE'd shared key.
  std::vector<float> latent(static_cast<size_t>(n_tok) * Dc);
  matmul(pool, ws, pw.matrix(*L.wkv_a), h, latent.data(), n_tok);
  std::vector<float> k_pe(static_cast<size_t>(n_tok) * rope);      // [n_tok, 1, rope]
  std::vector<float> q_pe(static_cast<size_t>(n_tok) * H * rope);  // [n_tok, H, rope]
  std::vector<float> q_nope(static_cast<size_t>(n_tok) * nope);    // [n_tok, nope] of one head
  for (int t = 0; t < n_tok; ++t) {
    float* row = latent.data() + static_cast<size_t>(t) * Dc;
    ops::rmsnorm(row, floats(L.kv_a_norm), row, 1, R, hp.rms_eps);
    std::copy_n(row + R, rope, k_pe.data() + static_cast<size_t>(t) * rope);
    for (int hh = 0; hh < H; ++hh)
      std::copy_n(q.data() + (static_cast<size_t>(t) * H + hh) * hd + nope, rope,
                  q_pe.data() + (static_cast<size_t>(t) * H + hh) * rope);
  }
  ops::rope(k_pe.data(), rope_table, 1, rope, arch.rope_style);
  ops::rope(q_pe.data(), rope_table, H, rope, arch.rope_style);
  for (int t = 0; t < n_tok; ++t)
    std::copy_n(k_pe.data() + static_cast<size_t>(t) * rope, rope, latent.data() + static_cast<size_t>(t) * Dc + R);

  // Absorbed queries [n_tok, H, R + rope]: k_b(q_nope) per head, then q_pe.
  std::vector<float> q_abs(static_cast<size_t>(n_tok) * H * Dc);
  std::vector<float> tmp(static_cast<size_t>(n_tok) * std::max(R, Dv));  // [n_tok, R] per-head scratch
  for (int hh = 0; hh < H; ++hh) {
    for (int t = 0; t < n_tok; ++t)
      std::copy_n(q.data() + (static_cast<size_t>(t) * H + hh) * hd, nope, q_nope.data() + static_cast<size_t>(t) * nope);
    matmul(pool, ws, pw.matrix(*L.wk_b, hh), q_nope.data(), tmp.data(), n_tok);
    for (int t = 0; t < n_tok; ++t) {
      float* dst = q_abs.data() + (static_cast<size_t>(t) * H + hh) * Dc;
      std::copy_n(tmp.data() + static_cast<size_t>(t) * R, R, dst);
      std::copy_n(q_pe.data() + (static_cast<size_t>(t) * H + hh) * rope, rope, dst + R);
    }
  }
  const AttentionRows rows{batch.positions, batch.block_tables};
  ops::kv_store(kv, rows, ops::KvWrite{latent.data()}, n_tok);
  std::vector<float> ctx(static_cast<size_t>(n_tok) * H * R);  // [n_tok, H, R] attention output in latent space
  ops::attention_paged(pool, q_abs.data(), kv, rows, ctx.data(), n_tok, H, 1.0f / std::sqrt(float(hd)));

  // Expand per head with v_b, then the output projection.
  std::vector<float> heads(static_cast<size_t>(n_tok) * H * Dv);  // [n_tok, H, Dv]
  std::vector<float> ctx_h(static_cast<size_t>(n_tok) * R);       // [n_tok, R] of one head
  for (int hh = 0; hh < H; ++hh) {
    for (int t = 0; t < n_tok; ++t)
      std::copy_n(ctx.data() + (static_cast<size_t>(t) * H + hh) * R, R, ctx_h.data() + static_cast<size_t>(t) * R);
    matmul(pool, ws, pw.matrix(*L.wv_b, hh), ctx_h.data(), tmp.data(), n_tok);
    for (int t = 0; t < n_tok; ++t)
      std::copy_n(tmp.data() + static_cast<size_t>(t) * Dv, Dv, heads.data() + (static_cast<size_t>(t) * H + hh) * Dv);
  }
  matmul(pool, ws, pw.matrix(*L.wo), heads.data(), out, n_tok, ops::Accumulate::Yes);
}

void ffn_dense(ThreadPool& pool, const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
               const ops::MatmulInput& in, float* out, int n_tok, ForwardWorkspace& ws, ops::Accumulate accumulate,
               int down_channel_begin) {
  const size_t n = static_cast<size_t>(n_tok) * static_cast<size_t>(gate.n_out);
  float* g = ws.get(ForwardWorkspace::Buffer::Gate, n);  // [n_tok, n_ff]
  float* u = ws.get(ForwardWorkspace::Buffer::Up, n);    // [n_tok, n_ff]
  const WeightMatrix gate_up[] = {gate, up};
  observe(ws, gate_up, in, n_tok);
  ops::matmul_swiglu(pool, gate, up, in, g, u, n_tok);
  const int n_ff = static_cast<int>(gate.n_out), n_down = static_cast<int>(down.n_in);
  const float* h = n_down == n_ff ? g : widen_rows(g, n_tok, n_ff, n_down, down_channel_begin,
                                                   ws.get(ForwardWorkspace::Buffer::Wide, static_cast<size_t>(n_tok) * n_down));
  matmul(pool, ws, down, h, out, n_tok, accumulate);
}

void ffn_moe(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const LayerWeights& L, const float* h, float* out,
             int n_tok, ForwardWorkspace& ws, const ExpertShare& share) {
  const int E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used;
  std::vector<float> probs(static_cast<size_t>(n_tok) * X);  // [n_tok, n_expert]
  matmul(pool, ws, pw.matrix(*L.ffn_router), h, probs.data(), n_tok);
  // Route: per token, the top-k experts and their weights.
  std::vector<std::vector<std::pair<int, float>>> routed(static_cast<size_t>(X));  // expert -> (token, weight)
  std::vector<int> order(static_cast<size_t>(X));
  for (int t = 0; t < n_tok; ++t) {
    float* p = probs.data() + static_cast<size_t>(t) * X;
    if (hp.expert_gating == HParams::Gating::Softmax)
      ops::softmax(p, X);
    else
      for (int e = 0; e < X; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int j = 0; j < K; ++j) sum += p[order[j]];
    const float factor = hp.expert_weights_scale / (hp.expert_weights_norm ? sum : 1.0f);
    for (int j = 0; j < K; ++j) routed[static_cast<size_t>(order[j])].push_back({t, p[order[j]] * factor});
  }
  ws.expert_tokens.resize(static_cast<size_t>(X));
  for (int e = 0; e < X; ++e) ws.expert_tokens[static_cast<size_t>(e)] += static_cast<int64_t>(routed[static_cast<size_t>(e)].size());
  if (L.ffn_gate_shexp && share.shared)
    ffn_dense(pool, pw.matrix(*L.ffn_gate_shexp), pw.matrix(*L.ffn_up_shexp),
              pw.matrix(*L.ffn_down_shexp), ops::MatmulInput{h}, out, n_tok, ws, ops::Accumulate::Yes);
  std::vector<float> xs, ys;  // [n_routed, n_embd] gathered inputs and expert outputs
  for (int e = std::max(share.begin, 0); e < std::min(share.end, X); ++e) {
    const auto& tokens = routed[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    const int n = static_cast<int>(tokens.size());
    xs.resize(static_cast<size_t>(n) * E);
    ys.resize(static_cast<size_t>(n) * E);
    for (int i = 0; i < n; ++i)
      std::copy_n(h + static_cast<size_t>(tokens[i].first) * E, E, xs.data() + static_cast<size_t>(i) * E);
    ffn_dense(pool, pw.matrix(*L.ffn_gate_exps, e), pw.matrix(*L.ffn_up_exps, e),
              pw.matrix(*L.ffn_down_exps, e), ops::MatmulInput{xs.data()}, ys.data(), n, ws, ops::Accumulate::No);
    for (int i = 0; i < n; ++i) {
      float* o = out + static_cast<size_t>(tokens[i].first) * E;
      const float* y = ys.data() + static_cast<size_t>(i) * E;
      for (int d = 0; d < E; ++d) o[d] += tokens[i].second * y[d];
    }
  }
}

}  // namespace kestrel::layers
