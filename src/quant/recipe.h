// Which type each tensor of a model gets when it is quantized to a named scheme ("Q4_K_M", "Q8_0", ...):
// llama.cpp's rules (llama-quant.cpp), so files written by `kestrel quantize` hold the tensor types a
// llama.cpp user expects of that name.
//
// - Quantized: 2-D and 3-D tensors named *.weight, except the MoE router (ffn_gate_inp) and normalisation
//   weights; everything else is copied as it is.
// - The output matrix (or token_embd when the model ties it as the output) gets Q6_K unless the scheme's
//   base is Q8_0, FP8_E4M3 or a float type (Q8_0 when its rows are not a multiple of 256).
// - Q4_K_M and Q5_K_M: attn_v and ffn_down get Q6_K in the first and last eighth of the layers and every
//   third layer between ("use_more_bits").
// - Q3_K_M: attn_v Q5_K in layers 0 and 1, else Q4_K; ffn_down Q5_K in the first sixteenth of the layers,
//   else Q4_K; attn_output Q4_K.
// - Q2_K: attn_v Q4_K for GQA models with at least 4 query heads per KV head, else Q3_K; ffn_down and
//   attn_output Q3_K.
// - Models with 8 experts get Q8_0 for attn_k and attn_v, and (under Q2_K, Q3_K_M and Q4_K_M) Q5_K for
//   attn_output.
// - A tensor whose rows do not split into the chosen type's blocks falls back as llama.cpp's does: Q4_K to
//   Q5_0, Q5_K to Q5_1, Q6_K to Q8_0; then F16 where the rows do not split into 32 either.
// - Not followed: the bump of 70B-class GQA models' attn_v (kestrel cannot tell a 70B model's type).
// - pure (llama.cpp's --pure): every quantized tensor gets the base type (fallbacks still apply).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace kestrel {

struct QuantScheme {
  std::string name;     // as users write it: "Q4_K_M"
  DType base;           // the type most tensors get
  // llama.cpp's per-tensor adjustments of the mixtures (see above); Pure: the base type throughout (but for the
  // output, the 8-expert rules and the fallbacks).
  enum class Mix { Pure, KM, Q3_K_M, Q2_K } mix = Mix::Pure;
  uint32_t file_type;   // GGUF general.file_type (llama.cpp's llama_ftype)
};

// The scheme for a name (case-insensitive: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M (alias Q3_K), Q4_K_M
// (alias Q4_K), Q5_K_S, Q5_K_M (alias Q5_K), Q6_K, F16, BF16, F32, W8A8, FP8_E4M3 (alias FP8), S24_F16,
// S24_Q8, S24_Q4: the last five kestrel's own types, not llama.cpp's), or nullopt.
// The 2:4 sparse schemes (quant/sparse24.h) give the matrices of the blocks (blk.N.*) their 2:4 type (a row
// that is not yet 2:4 sparse is pruned to it by magnitude) and every other tensor the rules of the dense
// scheme of the value type (F16, Q8_0, Q4_0); rows that do not split into 64 get the value type too.
// W8A8 (base I8) picks its tensors' types itself (model/w8a8_quantizer.h), not by quant_tensor_type.
std::optional<QuantScheme> find_quant_scheme(std::string_view name);
// Every name find_quant_scheme accepts, for help and error messages: "Q8_0, Q4_0, ...".
std::string quant_scheme_names();

// What the rules need to know about the model as a whole.
struct QuantModelFacts {
  int n_layers = 0;
  int n_expert = 0;
  bool has_output = true;  // false: token_embd doubles as the output matrix
  int n_gqa = 1;           // query heads per KV head
};

// The type tensor `name` with dims (ggml order: dims[0] is the row length) is written in; nullopt when it
// is copied unchanged.
std::optional<DType> quant_tensor_type(const QuantScheme& scheme, bool pure, const std::string& name,
                                       const std::vector<int64_t>& dims, const QuantModelFacts& facts);

}  // namespace kestrel
