// Shared transformer blocks that architectures compose. Each takes the normalised input and adds its
// output to `out`, the residual stream (its last projection stores into it as the GEMM threads finish their
// rows, so no separate residual pass runs).
#pragma once
#include <functional>

#include "compute/ops.h"
#include "model/arch.h"
#include "model/model_input.h"
#include "model/hparams.h"
#include "model/packed_weights.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace kestrel::layers {

// Self-attention with GQA, optional q/k/v bias and per-head q/k norm, RoPE, paged KV, with the layer's
// heads (`shape`; kv holds shape.n_kv_heads). in: [n_tok, n_embd] rows with the block's norm (applied as
// the q/k/v projections quantize them) -> out: [n_tok, n_embd] += the block's output. Scratch: ws's Q, K,
// V and AttnOut buffers. before_attending (optional) gets the batch's K rows (before RoPE) and V rows,
// [n_tok, n_kv_heads, head_dim] each, after they are computed and before any query attends: context
// parallelism stores the other ranks' rows into kv there.
using KvRowsHook = std::function<void(const float* k, const float* v)>;
void attention(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const LayerShape& shape, const ArchTraits& arch,
               const LayerWeights& L, const ops::RopeTable& rope, const ModelInput& batch, const KvLayerView& kv,
               const ops::MatmulInput& in, float* out, ForwardWorkspace& ws, const KvRowsHook& before_attending = {});

// Multi-head latent attention (DeepSeek-V2), computed in latent space: each head's q_nope is absorbed by
// k_b into a kv_lora_rank-wide query, so attention runs over the cached [latent | rope key] rows directly
// (one KV "head" shared by every query head), and the latent output is expanded by v_b per head.
// h: [n_tok, n_embd] -> out: [n_tok, n_embd] += the block's output.
void attention_mla(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const ArchTraits& arch, const LayerWeights& L,
                   const ops::RopeTable& rope, const ModelInput& batch, const KvLayerView& kv, const float* h,
                   float* out, ForwardWorkspace& ws);

// SwiGLU feed-forward: down(silu(gate(h)) * up(h)), h = in's rows after its norm (if any), written to out
// or, with Accumulate::Yes, added to it. in: [n_tok, n_embd] -> out: [n_tok, n_embd]. Scratch: ws's Gate
// and Up buffers. When down takes more channels than gate and up give (a tensor-parallel rank multiplying
// the whole ffn_down, LayerShape::down_channels), theirs are its channels from down_channel_begin and the
// others are zero (ws's Wide buffer).
void ffn_dense(ThreadPool& pool, const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
               const ops::MatmulInput& in, float* out, int n_tok, ForwardWorkspace& ws, ops::Accumulate accumulate,
               int down_channel_begin = 0);

// Mixture of experts: softmax (or sigmoid) router over n_expert, top-k per token, optionally renormalised
// and scaled; each chosen expert runs once over all the tokens routed to it; shared experts, when present,
// see every token. h: [n_tok, n_embd] -> out: [n_tok, n_embd] += the block's output. Counts the routed
// pairs per expert into ws.expert_tokens.
// Expert parallel: every rank routes every token alike and runs only its share of the experts (and the
// shared experts only where `shared` says), so the ranks' outputs sum to the block's.
struct ExpertShare {
  int begin = 0, end = 1 << 30;  // the routed experts this rank runs, [begin, end)
  bool shared = true;            // runs the shared experts
};
void ffn_moe(ThreadPool& pool, const PackedWeights& pw, const HParams& hp, const LayerWeights& L, const float* h, float* out,
             int n_tok, ForwardWorkspace& ws, const ExpertShare& share = {});

}  // namespace kestrel::layers
