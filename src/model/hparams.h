// Hyperparameters read from GGUF metadata ("<arch>.*" keys), validated for consistency.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "model/arch.h"

namespace kestrel {

// One layer's attention heads and FFN width. Structured pruning (model/structured_pruner.h) gives layers
// different ones; GGUF stores them as per-layer arrays of head_count, head_count_kv and feed_forward_length.
struct LayerShape {
  int n_heads = 0;     // query heads, a multiple of n_kv_heads
  int n_kv_heads = 0;
  int n_ff = 0;        // dense FFN width
  // attn_output's input heads when it is wider than n_heads (a tensor-parallel rank that multiplies the
  // whole matrix, model/tensor_parallel_shard.h): this layer's heads are its heads [wo_head_begin,
  // wo_head_begin + n_heads), the others' inputs zero. 0: attn_output takes exactly n_heads.
  int wo_heads = 0;
  int wo_head_begin = 0;
  // Likewise ffn_down's input channels when wider than n_ff: this layer's channels start at down_channel_begin.
  int down_channels = 0;
  int down_channel_begin = 0;
};

struct HParams {
  std::string arch;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  // The largest over layers (the same in every layer unless layer_shapes differ): what sizes scratch.
  int n_heads = 0;
  int n_kv_heads = 0;
  int n_ff = 0;          // dense FFN width
  std::vector<LayerShape> layer_shapes;  // [n_layers]
  int head_dim = 0;      // per-head q/k width (attention.key_length[_mla], default n_embd / n_heads)
  int n_rot = 0;         // rotated dims per head (rope.dimension_count)
  int n_ctx_train = 0;   // context_length
  int n_expert = 0;      // 0 for dense models
  int n_expert_used = 0;
  int n_ff_expert = 0;
  int n_expert_shared = 0;     // always-on shared experts (DeepSeek), each n_ff_expert wide
  int n_layer_dense_lead = 0;  // the first layers use a dense FFN even in MoE models
  bool expert_weights_norm = false;  // renormalise the top-k routing weights
  float expert_weights_scale = 1.f;  // multiply the routing weights
  enum class Gating { Softmax, Sigmoid } expert_gating = Gating::Softmax;
  // Latent attention (MLA); zero for other architectures.
  int q_lora_rank = 0;   // 0: a full-rank attn_q
  int kv_lora_rank = 0;  // latent width cached per token
  int head_dim_v = 0;    // per-head value width (equals head_dim without MLA)
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.f;
  // How an embedding model pools its tokens' hidden states (pooling_type: 1 mean, 2 CLS, 3 last; 0 or
  // absent: unspecified).
  int pooling_type = 0;

  const LayerShape& layer(int il) const { return layer_shapes[static_cast<size_t>(il)]; }
  bool uniform_layers() const;  // every layer has the same shape
};

Result<HParams> read_hparams(const GgufFile& file, const ArchTraits& arch);

}  // namespace kestrel
