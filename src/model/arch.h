// What distinguishes one decoder-only architecture from another. Each architecture file fills in one
// ArchTraits and the registry lists them; the shared layers read only these fields.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "compute/ops.h"

namespace kestrel {

struct ArchTraits {
  const char* name;        // general.architecture, also the metadata key prefix
  RopeStyle rope_style;
  bool qkv_bias;           // attn_{q,k,v}.bias present (Qwen2)
  bool qk_norm;            // per-head RMS norm of q and k before RoPE (Qwen3)
  bool moe;                // may have ffn_gate_inp + *_exps (Mixtral-style, top-k softmax routing)
  bool moe_norm_topk;      // renormalise the chosen experts' weights to sum to one (default when the file
                           // has no <arch>.expert_weights_norm)
  bool latent_attention = false;  // DeepSeek-V2 MLA: low-rank q, one cached latent + shared RoPE key per token
};

// nullptr when the architecture is not supported.
const ArchTraits* find_arch(std::string_view name);
std::vector<std::string> supported_arch_names();

// One per architecture file.
extern const ArchTraits kArchLlama;
extern const ArchTraits kArchQwen2;
extern const ArchTraits kArchQwen3;
extern const ArchTraits kArchQwen3Moe;
extern const ArchTraits kArchDeepseek2;

}  // namespace kestrel
