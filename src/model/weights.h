// The model's tensors, declared by role and checked at load time: every expected tensor must exist with
// the expected shape (and a float type where the forward pass reads it as floats), or loading fails
// naming the tensor, the expected shape and type, and the actual ones.
#pragma once
#include <unordered_map>
#include <vector>

#include "compute/ops.h"

#include "core/status.h"
#include "io/gguf.h"
#include "model/arch.h"
#include "model/hparams.h"

namespace kestrel {

struct LayerWeights {
  const TensorView* attn_norm = nullptr;  // [n_embd] F32
  const TensorView* wq = nullptr;         // [n_embd -> n_heads * head_dim]
  const TensorView* wk = nullptr;         // [n_embd -> n_kv_heads * head_dim]
  const TensorView* wv = nullptr;
  const TensorView* wo = nullptr;         // [n_heads * head_dim -> n_embd]
  const TensorView* bq = nullptr;         // optional biases (qwen2)
  const TensorView* bk = nullptr;
  const TensorView* bv = nullptr;
  const TensorView* q_norm = nullptr;     // optional per-head norms [head_dim] (qwen3)
  const TensorView* k_norm = nullptr;
  // Latent attention (MLA): wq (or wq_a -> q_a_norm -> wq_b) gives [n_heads, nope + rope] queries;
  // wkv_a gives the latent [kv_lora_rank] and the shared RoPE key [rope] of each token.
  const TensorView* wq_a = nullptr;       // [n_embd -> q_lora_rank]
  const TensorView* q_a_norm = nullptr;   // [q_lora_rank] F32
  const TensorView* wq_b = nullptr;       // [q_lora_rank -> n_heads * head_dim]
  const TensorView* wkv_a = nullptr;      // attn_kv_a_mqa [n_embd -> kv_lora_rank + rope]
  const TensorView* kv_a_norm = nullptr;  // [kv_lora_rank] F32
  const TensorView* wk_b = nullptr;       // [n_heads][nope -> kv_lora_rank]: absorbs q_nope into latent space
  const TensorView* wv_b = nullptr;       // [n_heads][kv_lora_rank -> head_dim_v]
  const TensorView* ffn_norm = nullptr;   // [n_embd] F32
  // Dense FFN (SwiGLU) ...
  const TensorView* ffn_gate = nullptr;   // [n_embd -> n_ff]
  const TensorView* ffn_up = nullptr;
  const TensorView* ffn_down = nullptr;   // [n_ff -> n_embd]
  // ... or mixture of experts.
  const TensorView* ffn_router = nullptr;     // ffn_gate_inp [n_embd -> n_expert] F32
  const TensorView* ffn_gate_exps = nullptr;  // [n_expert][n_embd -> n_ff_expert]
  const TensorView* ffn_up_exps = nullptr;
  const TensorView* ffn_down_exps = nullptr;  // [n_expert][n_ff_expert -> n_embd]
  const TensorView* ffn_gate_shexp = nullptr;  // shared experts [n_embd -> n_ff_expert * n_expert_shared]
  const TensorView* ffn_up_shexp = nullptr;
  const TensorView* ffn_down_shexp = nullptr;
};

struct ModelWeights {
  const TensorView* token_embd = nullptr;   // [n_vocab rows of n_embd]
  const TensorView* output_norm = nullptr;  // [n_embd] F32
  const TensorView* output = nullptr;       // [n_embd -> n_vocab]; token_embd when tied
  const TensorView* rope_freqs = nullptr;   // optional [n_rot / 2] F32 frequency divisors (Llama 3.1 scaling)
  std::vector<LayerWeights> layers;
  // W8A8: the scales of every int8 (DType::I8) matrix, from its companion tensors (NAME without
  // ".weight"): NAME.weight_scale F32 [n_out]; optional NAME.input_scale F32 [1] (static activation scale);
  // optional NAME.outlier_channels I32 [k] (ascending) with NAME.outlier_weight F16 [k, n_out] rows of k.
  std::unordered_map<const TensorView*, Int8Scales> int8;
};

Result<ModelWeights> bind_weights(const GgufFile& file, const ArchTraits& arch, const HParams& hp);

}  // namespace kestrel
