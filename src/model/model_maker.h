// Writes GGUF models with random weights for a given architecture, shape and weight type, with a
// synthetic SentencePiece vocabulary (byte fallback), so tests and benchmarks need no downloads.
// Weights ~ N(0, 0.05), norm weights ~ 1 + N(0, 0.1); deterministic for a given seed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

struct ModelShape {
  std::string arch = "llama";  // llama, qwen2, qwen3, qwen3moe, deepseek2 (MLA; n_kv_heads is ignored)
  int n_embd = 256;
  int n_layers = 2;
  int n_heads = 8;
  int n_kv_heads = 2;
  int n_ff = 512;
  int n_vocab = 512;           // at least 300 (special + byte tokens + pieces)
  int n_ctx = 2048;
  int n_expert = 0;            // > 0: MoE FFN (llama, qwen3moe)
  int n_expert_used = 0;
  bool tied_output = false;    // no output.weight: the classifier reuses token_embd
  float rope_freq_base = 10000.f;
};

struct MakeModelOptions {
  ModelShape shape;
  // A type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k) for every matrix, or a
  // mixture by llama.cpp's rules (q3_k_m, q4_k_m, q5_k_m, q2_k's mixture is not reachable here: "q2_k" is
  // the pure type; quant/recipe.h).
  std::string weight_type = "f32";
  uint64_t seed = 42;
  // Speculative-decoding pairs: from this layer on (-1: none) the output projections (attn_output,
  // ffn_down) are scaled by perturb_scale, so the model is its first perturb_from_layer layers plus a small
  // perturbation, and a draft made of those layers (same seed, n_layers = perturb_from_layer) predicts
  // most of its tokens. Tensors are seeded by name, so the pair shares every tensor it has in common.
  int perturb_from_layer = -1;
  float perturb_scale = 1.0f;
  // Activation outliers, as trained LLMs have them: this many channels of the residual stream (spread
  // over it, the same in every layer) get norm weights outlier_scale times larger in attn_norm and
  // ffn_norm, so every matrix that reads a normalised input sees those channels that much larger.
  int outlier_channels = 0;
  float outlier_scale = 20.0f;
  // Standard deviation of the matrices' random values: 0.05 for every matrix (the default), or with
  // fan_in_init 1 / sqrt(row length), as trained models' weights scale. At widths past a few hundred the
  // fixed 0.05 makes every layer amplify small changes of its input (0.05 * sqrt(2048) = 2.3 at the
  // TinyLlama shape), so a deep model is chaotic and any quantization error saturates the KL divergence;
  // with fan_in_init the layers keep their input's scale and quantization errors stay measurable.
  bool fan_in_init = false;
  // A GGUF file (a model, or a vocabulary-only file such as llama.cpp's ggml-vocab-*.gguf) whose
  // tokenizer.* metadata the model takes instead of a synthetic vocabulary; shape.n_vocab must equal its
  // token count. A random model with a real tokenizer: chat templates, grammars and tokenization behave
  // as with the real model.
  std::string vocab_from;
};

// The channels make_model plants outliers on: `count` of [0, n_embd), sorted.
std::vector<int> outlier_channels(int n_embd, int count, uint64_t seed);

Status make_model(const MakeModelOptions& options, const std::string& path,
                  const std::function<void(double)>& progress = {});

// "tinyllama" (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000), "stories-like" ... ;
// false when the name is unknown.
bool preset_shape(const std::string& name, ModelShape& shape);

}  // namespace kestrel
