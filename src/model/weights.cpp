#include "model/weights.h"

#include <cmath>
#include <set>

namespace kestrel {
namespace {

class Binder {
 public:
  explicit Binder(const GgufFile& f) : f_(f) {}

  // Finds `name` and checks its shape (ggml order). float_only: must be F32 (norms, biases, router).
  Result<const TensorView*> get(const std::string& name, std::vector<int64_t> shape, bool float_only,
                                bool required = true) {
    const TensorView* t = f_.find_tensor(name);
    if (!t) {
      if (required) return Error{"missing tensor '" + name + "' (expected shape " + shape_str(shape) + ")"};
      return static_cast<const TensorView*>(nullptr);
    }
    used_.insert(name);
    bool match = t->n_dims == static_cast<int>(shape.size());
    for (size_t d = 0; match && d < shape.size(); ++d) match = t->ne[d] == shape[d];
    if (!match)
      return Error{"tensor '" + name + "' has shape " + t->shape_string() + ", expected " + shape_str(shape)};
    if (float_only && t->type != DType::F32)
      return Error{"tensor '" + name + "' has type " + dtype_name(t->type) + ", expected F32"};
    return t;
  }
  const std::set<std::string>& used() const { return used_; }
  // The tensor `name` (marked used), or null; its shape and type are the caller's to check.
  const TensorView* find(const std::string& name) {
    const TensorView* t = f_.find_tensor(name);
    if (t) used_.insert(name);
    return t;
  }

 private:
  static std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }
  const GgufFile& f_;
  std::set<std::string> used_;
};

// Binds the companions of int8 matrix t (ModelWeights::int8) and checks their contents.
Result<Int8Scales> bind_int8(Binder& b, const TensorView& t) {
  if (t.n_dims != 2) return Error{"tensor '" + t.name + "': int8 (W8A8) weights are supported for 2-D matrices only"};
  const int64_t n_in = t.ne[0], n_out = t.ne[1];
  const std::string base = t.name.size() > 7 && t.name.ends_with(".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
  Int8Scales s;
  auto row_scale = b.get(base + ".weight_scale", {n_out}, true);
  if (!row_scale.ok()) return Error{row_scale.error()};
  s.row_scale = reinterpret_cast<const float*>(row_scale.value()->data);
  for (int64_t r = 0; r < n_out; ++r)
    if (!std::isfinite(s.row_scale[r]) || s.row_scale[r] < 0)
      return Error{"tensor '" + base + ".weight_scale' holds an invalid scale at row " + std::to_string(r)};
  auto input_scale = b.get(base + ".input_scale", {1}, true, false);
  if (!input_scale.ok()) return Error{input_scale.error()};
  if (input_scale.value()) {
    s.input_scale = *reinterpret_cast<const float*>(input_scale.value()->data);
    if (!std::isfinite(s.input_scale) || s.input_scale < 0) return Error{"tensor '" + base + ".input_scale' is not a valid scale"};
  }
  const TensorView* channels = b.find(base + ".outlier_channels");
  if (!channels) return s;
  if (channels->type != DType::I32 || channels->n_dims != 1)
    return Error{"tensor '" + channels->name + "' must be a 1-D I32 list of input channels"};
  const int64_t k = channels->ne[0];
  auto weight = b.get(base + ".outlier_weight", {k, n_out}, false);
  if (!weight.ok()) return Error{weight.error()};
  if (weight.value()->type != DType::F16) return Error{"tensor '" + base + ".outlier_weight' must be F16"};
  s.outlier_channels = std::span(reinterpret_cast<const int32_t*>(channels->data), static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j)
    if (s.outlier_channels[j] < (j ? s.outlier_channels[j - 1] + 1 : 0) || s.outlier_channels[j] >= n_in)
      return Error{"tensor '" + channels->name + "' must list ascending input channels below " + std::to_string(n_in)};
  s.outlier_weight = reinterpret_cast<const uint16_t*>(weight.value()->data);
  return s;
}

}  // namespace

Result<ModelWeights> bind_weights(const GgufFile& file, const ArchTraits& arch, const HParams& hp) {
  Binder b(file);
  ModelWeights w;
  const int64_t E = hp.n_embd, V = hp.n_vocab;
#define BIND(dst, ...)                      \
  {                                         \
    auto r = b.get(__VA_ARGS__);            \
    if (!r.ok()) return Error{r.error()};   \
    dst = r.value();                        \
  }
  BIND(w.token_embd, "token_embd.weight", {E, V}, false);
  BIND(w.output_norm, "output_norm.weight", {E}, true);
  BIND(w.output, "output.weight", {E, V}, false, false);
  if (!w.output) w.output = w.token_embd;  // tied classifier
  BIND(w.rope_freqs, "rope_freqs.weight", {hp.n_rot / 2}, true, false);

  w.layers.resize(static_cast<size_t>(hp.n_layers));
  for (int il = 0; il < hp.n_layers; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    const LayerShape& shape = hp.layer(il);
    const int64_t H = shape.n_heads, Dq = H * hp.head_dim, Dkv = int64_t{shape.n_kv_heads} * hp.head_dim,
                  Dv = H * hp.head_dim_v;
    BIND(L.attn_norm, p + "attn_norm.weight", {E}, true);
    if (arch.latent_attention) {
      const int64_t R = hp.kv_lora_rank, nope = hp.head_dim - hp.n_rot;
      if (hp.q_lora_rank > 0) {
        BIND(L.wq_a, p + "attn_q_a.weight", {E, hp.q_lora_rank}, false);
        BIND(L.q_a_norm, p + "attn_q_a_norm.weight", {hp.q_lora_rank}, true);
        BIND(L.wq_b, p + "attn_q_b.weight", {hp.q_lora_rank, Dq}, false);
      } else {
        BIND(L.wq, p + "attn_q.weight", {E, Dq}, false);
      }
      BIND(L.wkv_a, p + "attn_kv_a_mqa.weight", {E, R + hp.n_rot}, false);
      BIND(L.kv_a_norm, p + "attn_kv_a_norm.weight", {R}, true);
      BIND(L.wk_b, p + "attn_k_b.weight", {nope, R, H}, false);
      BIND(L.wv_b, p + "attn_v_b.weight", {R, hp.head_dim_v, H}, false);
    } else {
      BIND(L.wq, p + "attn_q.weight", {E, Dq}, false);
      BIND(L.wk, p + "attn_k.weight", {E, Dkv}, false);
      BIND(L.wv, p + "attn_v.weight", {E, Dkv}, false);
    }
    BIND(L.wo, p + "attn_output.weight", {Dv, E}, false);
    if (arch.qkv_bias) {
      BIND(L.bq, p + "attn_q.bias", {Dq}, true);
      BIND(L.bk, p + "attn_k.bias", {Dkv}, true);
      BIND(L.bv, p + "attn_v.bias", {Dkv}, true);
    }
    if (arch.qk_norm) {
      BIND(L.q_norm, p + "attn_q_norm.weight", {hp.head_dim}, true);
      BIND(L.k_norm, p + "attn_k_norm.weight", {hp.head_dim}, true);
    }
    BIND(L.ffn_norm, p + "ffn_norm.weight", {E}, true);
    if (hp.n_expert > 0 && il >= hp.n_layer_dense_lead) {
      const int64_t X = hp.n_expert, F = hp.n_ff_expert;
      BIND(L.ffn_router, p + "ffn_gate_inp.weight", {E, X}, true);
      BIND(L.ffn_gate_exps, p + "ffn_gate_exps.weight", {E, F, X}, false);
      BIND(L.ffn_up_exps, p + "ffn_up_exps.weight", {E, F, X}, false);
      BIND(L.ffn_down_exps, p + "ffn_down_exps.weight", {F, E, X}, false);
      if (hp.n_expert_shared > 0) {
        const int64_t S = F * hp.n_expert_shared;
        BIND(L.ffn_gate_shexp, p + "ffn_gate_shexp.weight", {E, S}, false);
        BIND(L.ffn_up_shexp, p + "ffn_up_shexp.weight", {E, S}, false);
        BIND(L.ffn_down_shexp, p + "ffn_down_shexp.weight", {S, E}, false);
      }
    } else {
      BIND(L.ffn_gate, p + "ffn_gate.weight", {E, shape.n_ff}, false);
      BIND(L.ffn_up, p + "ffn_up.weight", {E, shape.n_ff}, false);
      BIND(L.ffn_down, p + "ffn_down.weight", {shape.n_ff, E}, false);
    }
  }
#undef BIND
  // Int8 matrices bring their scales; the token embedding is read by rows and must decode on its own.
  if (w.token_embd->type == DType::I8 || w.token_embd->type == DType::I32)
    return Error{"tensor 'token_embd.weight' has type " + std::string(dtype_name(w.token_embd->type)) + ", which cannot be looked up by row"};
  std::vector<const TensorView*> matrices{w.output};
  for (const LayerWeights& L : w.layers)
    for (const TensorView* t : {L.wq, L.wk, L.wv, L.wo, L.wq_a, L.wq_b, L.wkv_a, L.wk_b, L.wv_b, L.ffn_gate, L.ffn_up,
                                L.ffn_down, L.ffn_gate_exps, L.ffn_up_exps, L.ffn_down_exps, L.ffn_gate_shexp,
                                L.ffn_up_shexp, L.ffn_down_shexp})
      if (t) matrices.push_back(t);
  for (const TensorView* t : matrices) {
    if (t->type == DType::I32) return Error{"tensor '" + t->name + "' has type I32, not a weight type"};
    if (t->type != DType::I8 || w.int8.count(t)) continue;
    auto scales = bind_int8(b, *t);
    if (!scales.ok()) return Error{scales.error()};
    w.int8.emplace(t, scales.value());
  }
  // Tensors we would silently ignore mean a feature we do not implement: refuse rather than mis-compute.
  for (const TensorView& t : file.tensors())
    if (!b.used().count(t.name))
      return Error{"tensor '" + t.name + "' is not used by the " + std::string(arch.name) +
                   " architecture as implemented (unsupported variant?)"};
  return w;
}

}  // namespace kestrel
