// Hyperparameters read from GGUF metadata ("<arch>.*" keys), validated for consistency.
#pragma once
#include <string>

#include "core/status.h"
#include "io/gguf.h"
#include "model/arch.h"

namespace kestrel {

struct HParams {
  std::string arch;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;      // per-head q/k/v width (attention.key_length, default n_embd / n_heads)
  int n_ff = 0;          // dense FFN width
  int n_rot = 0;         // rotated dims per head (rope.dimension_count)
  int n_ctx_train = 0;   // context_length
  int n_expert = 0;      // 0 for dense models
  int n_expert_used = 0;
  int n_ff_expert = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.f;
};

Result<HParams> read_hparams(const GgufFile& file, const ArchTraits& arch);

}  // namespace kestrel
