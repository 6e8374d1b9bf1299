// Llama 2/3, Mistral, TinyLlama, Mixtral: GQA/MQA/MHA from head_count_kv, tied or separate output,
// interleaved-pair RoPE (the GGUF converter permutes Q/K rows for it), optional Mixtral-style MoE.
#include "model/arch.h"

namespace kestrel {
const ArchTraits kArchLlama = {
    .name = "llama", .rope_style = RopeStyle::Interleaved, .qkv_bias = false, .qk_norm = false,
    .moe = true, .moe_norm_topk = true,
};
}  // namespace kestrel
