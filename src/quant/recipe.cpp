#include "quant/recipe.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "quant/sparse24.h"

namespace kestrel {
namespace {

// llama.cpp's llama_ftype ids for general.file_type.
constexpr uint32_t kFileF32 = 0, kFileF16 = 1, kFileQ4_0 = 2, kFileQ4_1 = 3, kFileQ8_0 = 7, kFileQ5_0 = 8,
                   kFileQ5_1 = 9, kFileQ2_K = 10, kFileQ3_K_M = 12, kFileQ4_K_M = 15, kFileQ5_K_S = 16, kFileQ5_K_M = 17,
                   kFileQ6_K = 18, kFileBF16 = 32;
constexpr uint32_t kFileW8A8 = 1024;  // kestrel's (model/w8a8_quantizer.h); llama.cpp names none
constexpr uint32_t kFileFP8 = 1025;   // kestrel's FP8_E4M3 type
constexpr uint32_t kFileS24_F16 = 1026, kFileS24_Q8 = 1027, kFileS24_Q4 = 1028;  // kestrel's 2:4 sparse types

using Mix = QuantScheme::Mix;
const std::array<QuantScheme, 19> kSchemes = {{
    {"F32", DType::F32, Mix::Pure, kFileF32},
    {"F16", DType::F16, Mix::Pure, kFileF16},
    {"BF16", DType::BF16, Mix::Pure, kFileBF16},
    {"Q8_0", DType::Q8_0, Mix::Pure, kFileQ8_0},
    {"Q4_0", DType::Q4_0, Mix::Pure, kFileQ4_0},
    {"Q4_1", DType::Q4_1, Mix::Pure, kFileQ4_1},
    {"Q5_0", DType::Q5_0, Mix::Pure, kFileQ5_0},
    {"Q5_1", DType::Q5_1, Mix::Pure, kFileQ5_1},
    {"Q2_K", DType::Q2_K, Mix::Q2_K, kFileQ2_K},
    {"Q3_K_M", DType::Q3_K, Mix::Q3_K_M, kFileQ3_K_M},
    {"Q4_K_M", DType::Q4_K, Mix::KM, kFileQ4_K_M},
    {"Q5_K_S", DType::Q5_K, Mix::Pure, kFileQ5_K_S},
    {"Q5_K_M", DType::Q5_K, Mix::KM, kFileQ5_K_M},
    {"Q6_K", DType::Q6_K, Mix::Pure, kFileQ6_K},
    {"W8A8", DType::I8, Mix::Pure, kFileW8A8},
    {"FP8_E4M3", DType::FP8_E4M3, Mix::Pure, kFileFP8},
    {"S24_F16", DType::S24_F16, Mix::Pure, kFileS24_F16},
    {"S24_Q8", DType::S24_Q8, Mix::Pure, kFileS24_Q8},
    {"S24_Q4", DType::S24_Q4, Mix::Pure, kFileS24_Q4},
}};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// blk.N.* -> N, else -1.
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int n = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer between.
bool more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The type itself when rows of n split into its blocks, else the fallback llama.cpp takes (a 32-block type
// of about the same bits, then F16; llama.cpp's IQ4_NL for Q2_K / Q3_K is Q4_0 here, kestrel having no IQ types).
DType fit_rows(DType t, int64_t n) {
  if (n % dtype_traits(t).block_elems == 0) return t;
  DType fallback = DType::F16;
  if (is_sparse24(t)) return fit_rows(sparse24_value_type(t), n);
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: fallback = DType::Q4_0; break;
    case DType::Q4_K: fallback = DType::Q5_0; break;
    case DType::Q5_K: fallback = DType::Q5_1; break;
    case DType::Q6_K: fallback = DType::Q8_0; break;
    default: break;
  }
  return n % dtype_traits(fallback).block_elems == 0 ? fallback : DType::F16;
}

}  // namespace

std::optional<QuantScheme> find_quant_scheme(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "Q4_K") upper = "Q4_K_M";  // llama-quantize's aliases
  if (upper == "Q5_K") upper = "Q5_K_M";
  if (upper == "Q3_K") upper = "Q3_K_M";
  if (upper == "FP8") upper = "FP8_E4M3";
  for (const QuantScheme& s : kSchemes)
    if (upper == s.name) return s;
  return std::nullopt;
}

std::string quant_scheme_names() {
  std::string names;
  for (const QuantScheme& s : kSchemes) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

std::optional<DType> quant_tensor_type(const QuantScheme& scheme, bool pure, const std::string& name,
                                       const std::vector<int64_t>& dims, const QuantModelFacts& facts) {
  const bool weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  if (!weight || dims.size() < 2 || contains(name, "ffn_gate_inp") || contains(name, "_norm")) return std::nullopt;
  const int64_t row = dims[0];
  DType t = scheme.base;
  if (is_sparse24(scheme.base)) {
    // 2:4 sparsity for the blocks' matrices only; the embeddings and the output matrix stay dense, of the
    // value type (the output by the rules of the dense scheme of that type)
    if (layer_of(name) >= 0) return fit_rows(t, row);
    const QuantScheme dense{scheme.name, sparse24_value_type(scheme.base), Mix::Pure, scheme.file_type};
    return quant_tensor_type(dense, pure, name, dims, facts);
  }
  if (!pure && !is_float(scheme.base)) {
    const bool output = name == "output.weight" || (!facts.has_output && name == "token_embd.weight");
    const int layer = layer_of(name);
    if (output) {
      if (scheme.base != DType::FP8_E4M3) t = row % 256 != 0 || scheme.base == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
    } else if (contains(name, "attn_v.weight")) {
      if (scheme.mix == Mix::KM && more_bits(layer, facts.n_layers)) t = DType::Q6_K;
      if (scheme.mix == Mix::Q3_K_M) t = layer < 2 ? DType::Q5_K : DType::Q4_K;
      if (scheme.mix == Mix::Q2_K) t = facts.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
      if (facts.n_expert == 8) t = DType::Q8_0;  // "trades just ~128MB" for 8-expert models
    } else if (contains(name, "attn_k.weight")) {
      if (facts.n_expert == 8) t = DType::Q8_0;
    } else if (contains(name, "ffn_down")) {
      if (scheme.mix == Mix::KM && more_bits(layer, facts.n_layers)) t = DType::Q6_K;
      if (scheme.mix == Mix::Q3_K_M) t = layer < facts.n_layers / 16 ? DType::Q5_K : DType::Q4_K;
      if (scheme.mix == Mix::Q2_K) t = DType::Q3_K;
    } else if (contains(name, "attn_output.weight")) {
      const bool low_k_mix = scheme.mix == Mix::Q2_K || scheme.mix == Mix::Q3_K_M || (scheme.mix == Mix::KM && scheme.base == DType::Q4_K);
      if (facts.n_expert == 8 && low_k_mix) t = DType::Q5_K;
      else if (scheme.mix == Mix::Q3_K_M) t = DType::Q4_K;
      else if (scheme.mix == Mix::Q2_K) t = DType::Q3_K;
    }
  }
  return fit_rows(t, row);
}

}  // namespace kestrel
