#include "model/model_maker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"
#include "model/arch.h"
#include "quant/quantize.h"
#include "quant/recipe.h"

namespace kestrel {
namespace {

// splitmix64: cheap, well-mixed, and seekable — each row gets its own stream, so output does not
// depend on how rows are spread over threads.
uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_normal(float* out, size_t n, uint64_t stream, float mean, float stddev) {
  uint64_t state = stream;
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(splitmix(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    out[i] = mean + stddev * static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[i + 1] = mean + stddev * static_cast<float>(r * std::sin(a));
  }
}

// Synthetic SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then "▁", single characters
// and short strings (with and without the "▁" word marker), scored so shorter pieces merge first.
void synthetic_vocab(int n_vocab, std::vector<std::string>& tokens, std::vector<float>& scores,
                     std::vector<int32_t>& types) {
  tokens = {"<unk>", "<s>", "</s>"};
  types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.emplace_back(name);
    types.push_back(6);
  }
  const std::string space = "\xE2\x96\x81";
  const std::string alphabet = "etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ0123456789.,!?'\";:-()";
  std::vector<std::string> level{""};
  std::vector<std::string> pieces{space};
  while (static_cast<int>(tokens.size() + pieces.size()) < n_vocab) {
    std::vector<std::string> next;
    for (const auto& prefix : level)
      for (char c : alphabet) next.push_back(prefix + c);
    for (const auto& s : next) {
      pieces.push_back(s);
      pieces.push_back(space + s);
    }
    level = std::move(next);
    if (level.size() > static_cast<size_t>(n_vocab)) break;
  }
  for (size_t i = 0; static_cast<int>(tokens.size()) < n_vocab && i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    types.push_back(1);
  }
  scores.assign(tokens.size(), 0.f);
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
}

struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;
  DType type;
  bool is_norm;  // 1-D: filled around 1 instead of 0
  float scale = 1.0f;  // multiplies the random values (a speculative pair's perturbed output projections)
  bool outliers = false;  // a residual-stream norm: the outlier channels are scaled up
};

// A tensor's random stream is keyed by its name (FNV-1a), so two models that share tensor names share
// their values (a draft model is its target's first layers).
uint64_t name_key(const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace

std::vector<int> outlier_channels(int n_embd, int count, uint64_t seed) {
  std::vector<int> all(static_cast<size_t>(n_embd));
  for (int i = 0; i < n_embd; ++i) all[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(seed ^ 0x071E5ull);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(std::clamp(count, 0, n_embd)));
  std::sort(all.begin(), all.end());
  return all;
}

bool preset_shape(const std::string& name, ModelShape& s) {
  if (name == "tinyllama") {
    s = ModelShape{};
    s.n_embd = 2048; s.n_layers = 22; s.n_heads = 32; s.n_kv_heads = 4; s.n_ff = 5632; s.n_vocab = 32000;
    s.n_ctx = 4096;
    return true;
  }
  if (name == "tiny") {
    s = ModelShape{};
    return true;
  }
  return false;
}

Status make_model(const MakeModelOptions& options, const std::string& path,
                  const std::function<void(double)>& progress) {
  const ModelShape& s = options.shape;
  const ArchTraits* arch = find_arch(s.arch);
  if (!arch) return Error{"make-model: unknown architecture '" + s.arch + "'"};
  if (s.n_embd <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_ff <= 0)
    return Error{"make-model: every dimension must be positive"};
  if (s.n_heads % s.n_kv_heads != 0) return Error{"make-model: n_heads must be a multiple of n_kv_heads"};
  if (arch->latent_attention && (s.n_embd / s.n_heads) < 24)
    return Error{"make-model: latent attention needs at least 24 dims per head"};
  if (s.n_embd % s.n_heads != 0 || (s.n_embd / s.n_heads) % 2 != 0)
    return Error{"make-model: n_embd / n_heads must be an even integer"};
  if (s.n_vocab < 300) return Error{"make-model: n_vocab must be at least 300"};
  if (s.n_expert > 0 && (!arch->moe || s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return Error{"make-model: experts need an MoE-capable architecture and 1 <= n_expert_used <= n_expert"};

  // q4_k_m and q5_k_m mix types by llama.cpp's rules; every other type is "pure" (all matrices of that type).
  const std::optional<QuantScheme> named = find_quant_scheme(options.weight_type);
  const bool mixed = named && named->mix != QuantScheme::Mix::Pure && !dtype_from_name(options.weight_type);  // "q4_k_m", not "q4_k"
  const auto base = mixed ? std::optional<DType>(named->base) : dtype_from_name(options.weight_type);
  if (!base) return Error{"make-model: unknown weight type '" + options.weight_type + "'"};
  const QuantScheme scheme = mixed ? *named : QuantScheme{options.weight_type, *base, QuantScheme::Mix::Pure, 0};
  const QuantModelFacts facts{s.n_layers, s.n_expert, !s.tied_output, s.n_heads / s.n_kv_heads};
  const int64_t E = s.n_embd, hd = s.n_embd / s.n_heads, Dkv = hd * s.n_kv_heads, F = s.n_ff, V = s.n_vocab;
  // Latent attention (deepseek2) geometry: per head nope + rope query dims, a shared latent of kv_lora.
  const int64_t rope = std::min<int64_t>(16, hd / 2), nope = hd - rope, kv_lora = std::max<int64_t>(32, E / 4),
                q_lora = E / 2, H = s.n_heads;
  const bool mla = arch->latent_attention;
  const int dense_lead = (mla && s.n_expert > 0) ? 1 : 0;
  const int n_shared = mla && s.n_expert > 0 ? 1 : 0;
  std::vector<TensorPlan> plan;
  // A matrix's type by the scheme's rules (quant/recipe.h), given its name and dims (row length first).
  const auto matrix = [&](const std::string& name, std::vector<int64_t> dims, float scale = 1.0f) {
    const DType t = quant_tensor_type(scheme, !mixed, name, dims, facts).value_or(DType::F32);
    plan.push_back({name, std::move(dims), t, false, scale});
  };
  matrix("token_embd.weight", {E, V});
  for (int il = 0; il < s.n_layers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    plan.push_back({p + "attn_norm.weight", {E}, DType::F32, true, 1.0f, true});
    if (mla) {
      matrix(p + "attn_q_a.weight", {E, q_lora});
      plan.push_back({p + "attn_q_a_norm.weight", {q_lora}, DType::F32, true});
      matrix(p + "attn_q_b.weight", {q_lora, H * hd});
      matrix(p + "attn_kv_a_mqa.weight", {E, kv_lora + rope});
      plan.push_back({p + "attn_kv_a_norm.weight", {kv_lora}, DType::F32, true});
      matrix(p + "attn_k_b.weight", {nope, kv_lora, H});
      matrix(p + "attn_v_b.weight", {kv_lora, nope, H});
    } else {
      matrix(p + "attn_q.weight", {E, E});
      matrix(p + "attn_k.weight", {E, Dkv});
      matrix(p + "attn_v.weight", {E, Dkv});
    }
    if (arch->qkv_bias) {
      plan.push_back({p + "attn_q.bias", {E}, DType::F32, false});
      plan.push_back({p + "attn_k.bias", {Dkv}, DType::F32, false});
      plan.push_back({p + "attn_v.bias", {Dkv}, DType::F32, false});
    }
    if (arch->qk_norm) {
      plan.push_back({p + "attn_q_norm.weight", {hd}, DType::F32, true});
      plan.push_back({p + "attn_k_norm.weight", {hd}, DType::F32, true});
    }
    const int64_t Dv = mla ? H * nope : E;
    // Layers past a draft's are perturbations: their outputs into the residual stream are scaled down.
    const float out_scale = options.perturb_from_layer >= 0 && il >= options.perturb_from_layer ? options.perturb_scale : 1.0f;
    matrix(p + "attn_output.weight", {Dv, E}, out_scale);
    plan.push_back({p + "ffn_norm.weight", {E}, DType::F32, true, 1.0f, true});
    if (s.n_expert > 0 && il >= dense_lead) {
      plan.push_back({p + "ffn_gate_inp.weight", {E, s.n_expert}, DType::F32, false});
      if (n_shared > 0) {
        matrix(p + "ffn_gate_shexp.weight", {E, F});
        matrix(p + "ffn_up_shexp.weight", {E, F});
        matrix(p + "ffn_down_shexp.weight", {F, E}, out_scale);
      }
      matrix(p + "ffn_gate_exps.weight", {E, F, s.n_expert});
      matrix(p + "ffn_up_exps.weight", {E, F, s.n_expert});
      matrix(p + "ffn_down_exps.weight", {F, E, s.n_expert}, out_scale);
    } else {
      matrix(p + "ffn_gate.weight", {E, F});
      matrix(p + "ffn_up.weight", {E, F});
      matrix(p + "ffn_down.weight", {F, E}, out_scale);
    }
  }
  plan.push_back({"output_norm.weight", {E}, DType::F32, true});
  if (!s.tied_output) matrix("output.weight", {E, V});

  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "kestrel-random-" + s.arch);
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(E));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(F));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(mla ? 1 : s.n_kv_heads));
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(mla ? rope : hd));
  if (mla) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(kv_lora + rope));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(kv_lora));
    w.set_u32(a + "attention.key_length_mla", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length_mla", static_cast<uint32_t>(nope));
    w.set_u32(a + "attention.q_lora_rank", static_cast<uint32_t>(q_lora));
    w.set_u32(a + "attention.kv_lora_rank", static_cast<uint32_t>(kv_lora));
    w.set_u32(a + "leading_dense_block_count", static_cast<uint32_t>(dense_lead));
    w.set_u32(a + "expert_shared_count", static_cast<uint32_t>(n_shared));
  }
  w.set_f32(a + "rope.freq_base", s.rope_freq_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(F));
  }
  if (!options.vocab_from.empty()) {
    auto source = GgufFile::open(options.vocab_from);
    if (!source.ok()) return Error{"make-model: " + source.error()};
    const GgufValue* tokens = source->find("tokenizer.ggml.tokens");
    if (!tokens || !tokens->is_array()) return Error{"make-model: " + options.vocab_from + " has no tokenizer.ggml.tokens"};
    if (static_cast<int64_t>(tokens->array_size()) != s.n_vocab)
      return Error{"make-model: the model's n_vocab is " + std::to_string(s.n_vocab) + " but " + options.vocab_from +
                   " has " + std::to_string(tokens->array_size()) + " tokens"};
    for (const std::string& key : source->keys())
      if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, *source->find(key));
  } else {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    synthetic_vocab(s.n_vocab, tokens, scores, types);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
  }
  for (const auto& t : plan) w.add_tensor(t.name, t.type, t.dims);

  size_t total = 0, done = 0;
  for (size_t i = 0; i < plan.size(); ++i) total += w.tensor_bytes(i);
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<int> outliers = outlier_channels(s.n_embd, options.outlier_channels, options.seed);
  return w.write(path, [&](size_t index, std::vector<uint8_t>& bytes) {
    const TensorPlan& t = plan[index];
    const int64_t n_in = t.dims[0];
    const float matrix_std = options.fan_in_init ? 1.0f / std::sqrt(static_cast<float>(n_in)) : 0.05f;
    const size_t row_size = row_bytes(t.type, static_cast<size_t>(n_in));
    const size_t n_rows = bytes.size() / row_size;
    std::vector<std::thread> workers;
    for (unsigned th = 0; th < n_threads; ++th) {
      workers.emplace_back([&, th] {
        std::vector<float> row(static_cast<size_t>(n_in));  // [n_in]
        for (size_t r = th; r < n_rows; r += n_threads) {
          const uint64_t stream = options.seed * 0x100000001B3ull ^ name_key(t.name) ^ (r * 0x9E3779B97F4A7C15ull);
          fill_normal(row.data(), row.size(), stream, t.is_norm ? 1.0f : 0.0f, t.is_norm ? 0.1f : matrix_std * t.scale);
          if (t.outliers)
            for (int c : outliers) row[static_cast<size_t>(c)] *= options.outlier_scale;
          quantize_row(t.type, row.data(), bytes.data() + r * row_size, row.size());
        }
      });
    }
    for (auto& th : workers) th.join();
    done += bytes.size();
    if (progress) progress(static_cast<double>(done) / static_cast<double>(total));
  });
}

}  // namespace kestrel
