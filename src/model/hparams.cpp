#include "model/hparams.h"

#include <algorithm>

namespace kestrel {
namespace {

// Reads "<arch>.<suffix>" as an int in [lo, hi]; `fallback` when absent (or an error if required).
Result<int> read_int(const GgufFile& f, const std::string& key, int lo, int hi, std::optional<int> fallback) {
  auto v = f.get_int(key);
  if (!v.ok()) return Error{v.error()};
  if (!v.value()) {
    if (fallback) return *fallback;
    return Error{"missing required metadata '" + key + "'"};
  }
  const int64_t x = *v.value();
  if (x < lo || x > hi)
    return Error{"metadata '" + key + "' = " + std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]"};
  return static_cast<int>(x);
}

Result<float> read_float(const GgufFile& f, const std::string& key, float lo, float hi, float fallback) {
  auto v = f.get_float(key);
  if (!v.ok()) return Error{v.error()};
  if (!v.value()) return fallback;
  const double x = *v.value();
  if (!(x >= lo && x <= hi))
    return Error{"metadata '" + key + "' = " + std::to_string(x) + " is out of range"};
  return static_cast<float>(x);
}

// "<arch>.<suffix>" per layer: an integer (every layer) or an array of n_layers integers, each in [lo, hi];
// `fallback` in every layer when absent.
Result<std::vector<int>> read_layer_ints(const GgufFile& f, const std::string& key, int n_layers, int lo, int hi,
                                         std::optional<int> fallback) {
  const GgufValue* v = f.find(key);
  if (!v || !v->is_array()) {
    auto one = read_int(f, key, lo, hi, fallback);
    if (!one.ok()) return Error{one.error()};
    return std::vector<int>(static_cast<size_t>(n_layers), one.value());
  }
  if (v->array_type == GgufValueType::STRING || v->array_type == GgufValueType::FLOAT32 ||
      v->array_type == GgufValueType::FLOAT64 || v->array_type == GgufValueType::BOOL)
    return Error{"metadata '" + key + "' is an array of " + gguf_value_type_name(v->array_type) + ", expected integers"};
  if (v->numbers.size() != static_cast<size_t>(n_layers))
    return Error{"metadata '" + key + "' has " + std::to_string(v->numbers.size()) + " entries for " +
                 std::to_string(n_layers) + " layers"};
  std::vector<int> values;
  for (size_t il = 0; il < v->numbers.size(); ++il) {
    const double x = v->numbers[il];
    if (!(x >= lo && x <= hi))
      return Error{"metadata '" + key + "'[" + std::to_string(il) + "] = " + std::to_string(x) + " is out of range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]"};
    values.push_back(static_cast<int>(x));
  }
  return values;
}

// Per-layer shapes from head_count, head_count_kv and feed_forward_length (integers or per-layer arrays);
// hp's scalars become the largest of each.
Status read_layer_shapes(const GgufFile& f, const std::string& p, HParams& hp) {
  auto heads = read_layer_ints(f, p + "attention.head_count", hp.n_layers, 1, 4096, std::nullopt);
  if (!heads.ok()) return Error{heads.error()};
  auto kv_heads = read_layer_ints(f, p + "attention.head_count_kv", hp.n_layers, 1, 4096, std::nullopt);
  if (!kv_heads.ok()) {
    if (f.has(p + "attention.head_count_kv")) return Error{kv_heads.error()};
    kv_heads = heads;  // absent: multi-head attention
  }
  auto ff = read_layer_ints(f, p + "feed_forward_length", hp.n_layers, 1, 1 << 24, 1);
  if (!ff.ok()) return Error{ff.error()};
  hp.layer_shapes.clear();
  for (int il = 0; il < hp.n_layers; ++il) {
    const auto i = static_cast<size_t>(il);
    const LayerShape s{heads.value()[i], kv_heads.value()[i], ff.value()[i]};
    if (s.n_heads % s.n_kv_heads != 0)
      return Error{"head_count " + std::to_string(s.n_heads) + " is not a multiple of head_count_kv " +
                   std::to_string(s.n_kv_heads) + (hp.n_layers > 1 ? " in layer " + std::to_string(il) : "")};
    hp.layer_shapes.push_back(s);
    hp.n_heads = std::max(hp.n_heads, s.n_heads);
    hp.n_kv_heads = std::max(hp.n_kv_heads, s.n_kv_heads);
    hp.n_ff = std::max(hp.n_ff, s.n_ff);
  }
  return Status{};
}

}  // namespace

bool HParams::uniform_layers() const {
  for (const LayerShape& s : layer_shapes)
    if (s.n_heads != n_heads || s.n_kv_heads != n_kv_heads || s.n_ff != n_ff) return false;
  return true;
}

Result<HParams> read_hparams(const GgufFile& f, const ArchTraits& arch) {
  HParams hp;
  hp.arch = arch.name;
  const std::string p = std::string(arch.name) + ".";
  constexpr int kBig = 1 << 24;
#define READ_INT(field, key, lo, hi, fallback)                 \
  {                                                            \
    auto r = read_int(f, p + key, lo, hi, fallback);           \
    if (!r.ok()) return Error{r.error()};                      \
    hp.field = r.value();                                      \
  }
  READ_INT(n_embd, "embedding_length", 1, kBig, std::nullopt);
  READ_INT(n_layers, "block_count", 1, 4096, std::nullopt);
  if (Status shapes = read_layer_shapes(f, p, hp); !shapes.ok()) return Error{shapes.error()};
  const bool uniform = std::all_of(hp.layer_shapes.begin(), hp.layer_shapes.end(), [&](const LayerShape& s) {
    return s.n_heads == hp.n_heads && s.n_kv_heads == hp.n_kv_heads;
  });  // in head counts (FFN widths may differ in any architecture)
  if (!uniform && !f.has(p + "attention.key_length"))
    return Error{"per-layer head counts need '" + p + "attention.key_length' (the head size)"};
  if (!uniform && arch.latent_attention) return Error{"latent attention takes the same head count in every layer"};
  READ_INT(n_ctx_train, "context_length", 1, kBig, 2048);
  READ_INT(head_dim, "attention.key_length", 1, 4096, std::max(1, hp.n_embd / hp.n_heads));
  READ_INT(n_rot, "rope.dimension_count", 0, 4096, hp.head_dim);
  READ_INT(n_expert, "expert_count", 0, 4096, 0);
  READ_INT(n_expert_used, "expert_used_count", 0, 4096, 0);
  READ_INT(n_ff_expert, "expert_feed_forward_length", 1, kBig, hp.n_ff);
  READ_INT(n_expert_shared, "expert_shared_count", 0, 64, 0);
  READ_INT(n_layer_dense_lead, "leading_dense_block_count", 0, hp.n_layers, 0);
  READ_INT(head_dim_v, "attention.value_length", 1, 4096, hp.head_dim);
  READ_INT(pooling_type, "pooling_type", 0, 4, 0);
  if (arch.latent_attention) {
    READ_INT(q_lora_rank, "attention.q_lora_rank", 0, kBig, 0);
    READ_INT(kv_lora_rank, "attention.kv_lora_rank", 1, kBig, std::nullopt);
    READ_INT(head_dim, "attention.key_length_mla", 1, 4096, hp.head_dim);
    READ_INT(head_dim_v, "attention.value_length_mla", 1, 4096, hp.head_dim_v);
  }
  {
    auto gating = read_int(f, p + "expert_gating_func", 0, 2, 1);  // 1 softmax, 2 sigmoid
    if (!gating.ok()) return Error{gating.error()};
    if (gating.value() == 2) hp.expert_gating = HParams::Gating::Sigmoid;
  }
#undef READ_INT
  {
    auto norm = f.get_bool(p + "expert_weights_norm");
    if (!norm.ok()) return Error{norm.error()};
    hp.expert_weights_norm = norm.value().value_or(arch.moe_norm_topk);
    auto scale = read_float(f, p + "expert_weights_scale", 0.f, 1e6f, 1.f);
    if (!scale.ok()) return Error{scale.error()};
    hp.expert_weights_scale = scale.value();
    auto scaling = f.get_string(p + "rope.scaling.type");
    if (!scaling.ok()) return Error{scaling.error()};
    if (scaling.value() && *scaling.value() != "none")
      return Error{"RoPE scaling '" + *scaling.value() + "' (" + p + "rope.scaling.type) is not supported yet"};
  }
  auto eps = read_float(f, p + "attention.layer_norm_rms_epsilon", 0.f, 1.f, 1e-5f);
  if (!eps.ok()) return Error{eps.error()};
  hp.rms_eps = eps.value();
  auto base = read_float(f, p + "rope.freq_base", 1.f, 1e12f, 10000.f);
  if (!base.ok()) return Error{base.error()};
  hp.rope_freq_base = base.value();

  if (!arch.latent_attention && hp.head_dim_v != hp.head_dim)
    return Error{"attention.value_length " + std::to_string(hp.head_dim_v) + " differs from key_length " +
                 std::to_string(hp.head_dim) + ", which only latent attention supports"};
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0 || hp.n_rot > 1024)
    return Error{"rope.dimension_count " + std::to_string(hp.n_rot) + " must be even and at most the head size " +
                 std::to_string(hp.head_dim)};
  if (hp.n_expert > 0 && !arch.moe)
    return Error{std::string("architecture '") + arch.name + "' does not support experts (expert_count " +
                 std::to_string(hp.n_expert) + ")"};
  if (hp.n_expert > 0 && (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert))
    return Error{"expert_used_count " + std::to_string(hp.n_expert_used) + " must be in [1, expert_count " +
                 std::to_string(hp.n_expert) + "]"};
  const TensorView* embd = f.find_tensor("token_embd.weight");
  if (!embd) return Error{"missing tensor 'token_embd.weight'"};
  hp.n_vocab = static_cast<int>(embd->ne[1]);
  return hp;
}

}  // namespace kestrel
