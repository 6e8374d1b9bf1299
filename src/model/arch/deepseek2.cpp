// DeepSeek-V2 / V2-Lite: multi-head latent attention (a low-rank query, a per-token KV latent of
// kv_lora_rank floats plus one shared RoPE key, per-head k_b / v_b up-projections absorbed into the
// query and the output), interleaved-pair RoPE on the RoPE part only, leading dense layers, then MoE
// layers with routed experts and always-on shared experts.
#include "model/arch.h"

namespace kestrel {
const ArchTraits kArchDeepseek2 = {
    .name = "deepseek2", .rope_style = RopeStyle::Interleaved, .qkv_bias = false, .qk_norm = false,
    .moe = true, .moe_norm_topk = false, .latent_attention = true,
};
}  // namespace kestrel
