// Qwen3 and Qwen3-MoE: per-head RMS norm on q and k before RoPE, NeoX-style RoPE, no biases;
// the MoE variant routes each token to top-k of n experts with renormalised softmax weights.
#include "model/arch.h"

namespace kestrel {
const ArchTraits kArchQwen3 = {
    .name = "qwen3", .rope_style = RopeStyle::NeoX, .qkv_bias = false, .qk_norm = true,
    .moe = false, .moe_norm_topk = false,
};
const ArchTraits kArchQwen3Moe = {
    .name = "qwen3moe", .rope_style = RopeStyle::NeoX, .qkv_bias = false, .qk_norm = true,
    .moe = true, .moe_norm_topk = true,
};
}  // namespace kestrel
