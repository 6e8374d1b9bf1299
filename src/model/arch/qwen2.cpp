// Qwen2 / Qwen2.5: biases on the q, k and v projections; NeoX-style RoPE.
#include "model/arch.h"

namespace kestrel {
const ArchTraits kArchQwen2 = {
    .name = "qwen2", .rope_style = RopeStyle::NeoX, .qkv_bias = true, .qk_norm = false,
    .moe = false, .moe_norm_topk = false,
};
}  // namespace kestrel
