#include "model/key_centers.h"

#include <algorithm>
#include <numeric>

#include "compute/ops.h"

namespace kestrel {
namespace {
constexpr int kCalibrationTokens = 64;
constexpr int kShortestContext = 64;     // context lengths are taken log-uniform from here...
constexpr int kLongestContext = 32768;   // ...to the training context, at most this
constexpr int kPageTokens = 16;

bool centers_apply(const KvCacheSpec& spec) { return kv_type_quantized(spec.types.k) && !spec.v_in_k; }

// n token ids spread over the vocabulary's ordinary tokens (GGUF token type 1), skipping byte, control and
// unused tokens whose embeddings may never have been trained; without token types, the middle half.
std::vector<int32_t> calibration_tokens(const Model& model, int n) {
  const int32_t n_vocab = model.hparams().n_vocab;
  std::vector<int32_t> ordinary;
  const GgufValue* types = model.file().find("tokenizer.ggml.token_type");
  if (types && types->is_array() && types->numbers.size() == static_cast<size_t>(n_vocab))
    for (int32_t id = 0; id < n_vocab; ++id)
      if (types->numbers[static_cast<size_t>(id)] == 1) ordinary.push_back(id);
  if (ordinary.empty())
    for (int32_t id = n_vocab / 4; id < std::max(n_vocab / 4 + 1, 3 * n_vocab / 4); ++id) ordinary.push_back(id);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[i] = ordinary[(static_cast<size_t>(i) * 7919 + 13) % ordinary.size()];
  return tokens;
}

// RoPE's rotation averaged over where keys sit: cos and sin of every pair averaged over positions p with
// weight 1/max(p + 1, L0) - 1/N, the density of key positions when sequence lengths are log-uniform in
// [L0, N] (N the training context). Applied to a vector as one RoPE row, it gives the vector's mean over
// those positions: slow pairs keep most of it, pairs that turn often within short contexts lose it.
ops::RopeTable mean_turn(const HParams& hp, const float* freq_factors) {
  const int n_ctx = std::clamp(hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096, kShortestContext, kLongestContext);
  std::vector<int32_t> positions(static_cast<size_t>(n_ctx));  // [n_ctx]
  std::iota(positions.begin(), positions.end(), 0);
  const ops::RopeTable every = ops::rope_table(positions, hp.n_rot, hp.rope_freq_base, freq_factors);
  const size_t half = static_cast<size_t>(hp.n_rot / 2);
  std::vector<double> cos(half, 0.0), sin(half, 0.0);  // [n_rot / 2]
  double total = 0.0;
  for (int p = 0; p < n_ctx; ++p) {
    const double w = 1.0 / std::max(p + 1, kShortestContext) - 1.0 / n_ctx;
    total += w;
    for (size_t i = 0; i < half; ++i) {
      cos[i] += w * every.cos[static_cast<size_t>(p) * half + i];
      sin[i] += w * every.sin[static_cast<size_t>(p) * half + i];
    }
  }
  ops::RopeTable mean{hp.n_rot, std::vector<float>(half), std::vector<float>(half)};
  for (size_t i = 0; i < half; ++i) {
    mean.cos[i] = static_cast<float>(cos[i] / total);
    mean.sin[i] = static_cast<float>(sin[i] / total);
  }
  return mean;
}
}  // namespace

std::vector<float> measure_key_centers(const Model& model, ThreadPool& pool) {
  if (model.arch().latent_attention) return {};
  const HParams& hp = model.hparams();
  const int n = kCalibrationTokens;
  const int32_t n_blocks = (n + kPageTokens - 1) / kPageTokens;
  KvStorage kv(model.kv_spec(n_blocks, kPageTokens, KvType::F32));
  const KvCacheSpec& spec = kv.spec();
  const int D = spec.k_dim;

  const std::vector<int32_t> tokens = calibration_tokens(model, n);        // [n]
  std::vector<int32_t> positions(n), pages(static_cast<size_t>(n_blocks));  // [n] [n_blocks]
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(pages.begin(), pages.end(), 0);
  const std::vector<const int32_t*> tables(n, pages.data());
  const int32_t last_row = n - 1;
  const ModelInput batch{tokens, positions, tables, std::span<const int32_t>(&last_row, 1)};
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));  // [n_vocab] unused
  model.forward(pool, batch, kv, logits.data());

  const float* freq_factors =
      model.weights().rope_freqs ? reinterpret_cast<const float*>(model.weights().rope_freqs->data) : nullptr;
  std::vector<int32_t> back(n);  // [n] turning each key back by its position
  for (int i = 0; i < n; ++i) back[i] = -i;
  const ops::RopeTable unturn = ops::rope_table(back, hp.n_rot, hp.rope_freq_base, freq_factors);
  const ops::RopeTable turn = mean_turn(hp, freq_factors);

  std::vector<float> centers(spec.total_kv_heads() * D);  // [layer][kv_heads(layer)][D]
  std::vector<float> keys(static_cast<size_t>(n) * spec.n_kv_heads * D);  // [n][H][D] one layer's keys
  for (int il = 0; il < spec.n_layers; ++il) {
    const KvLayerView view = kv.layer(il);
    const int H = view.n_kv_heads;
    const size_t row = static_cast<size_t>(H) * D;
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < H; ++h)
        view.read_k(pages[i / kPageTokens], h, i % kPageTokens, keys.data() + (static_cast<size_t>(i) * H + h) * D);
    ops::rope(keys.data(), unturn, H, D, model.arch().rope_style);
    std::vector<double> mean(row, 0.0);  // [H][D] keys before RoPE, positions 1..n-1
    for (int i = 1; i < n; ++i)
      for (size_t j = 0; j < row; ++j) mean[j] += keys[static_cast<size_t>(i) * row + j];
    float* center = centers.data() + spec.heads_before(il) * D;
    for (size_t j = 0; j < row; ++j) center[j] = static_cast<float>(mean[j] / (n - 1));
    ops::rope(center, turn, H, D, model.arch().rope_style);
  }
  return centers;
}

void center_keys(KvStorage& kv, const Model& model, ThreadPool& pool) {
  if (centers_apply(kv.spec())) kv.set_key_centers(measure_key_centers(model, pool));
}

void center_keys(KvStorage& kv, const std::vector<float>& centers) {
  if (centers_apply(kv.spec())) kv.set_key_centers(centers);
}

}  // namespace kestrel
