#include "engine/embedder.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/forward_batch.h"
#include "model/key_centers.h"

namespace kestrel {

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

Result<Pooling> parse_pooling(std::string_view name) {
  for (Pooling p : {Pooling::Mean, Pooling::Cls, Pooling::Last})
    if (name == pooling_name(p)) return p;
  return Error{"unknown pooling '" + std::string(name) + "' (mean, cls or last)"};
}

Pooling model_pooling(const Model& model) {
  switch (model.hparams().pooling_type) {
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    default: return Pooling::Last;
  }
}

Embedder::Embedder(const Model& model, ThreadPool& pool, const EmbedderConfig& config)
    : model_(model), pool_(pool), config_(config) {
  if (model.process_groups() && model.process_groups()->split())
    throw std::invalid_argument("embeddings need the whole model in one process");
  if (config.max_batch_tokens < 1 || config.max_input_tokens < 1 || config.block_size < 1)
    throw std::invalid_argument("embedder limits must be positive");
}

Embedder::~Embedder() = default;

Result<std::vector<std::vector<float>>> Embedder::embed(std::span<const std::vector<int32_t>> inputs) {
  const int32_t n_vocab = model_.hparams().n_vocab, E = model_.hparams().n_embd;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string which = inputs.size() > 1 ? "input " + std::to_string(i) + ": " : "";
    if (inputs[i].empty()) return Error{which + "no tokens to embed"};
    if (inputs[i].size() > static_cast<size_t>(config_.max_input_tokens))
      return Error{which + std::to_string(inputs[i].size()) + " tokens exceed the longest input, " +
                   std::to_string(config_.max_input_tokens)};
    for (int32_t t : inputs[i])
      if (t < 0 || t >= n_vocab) return Error{which + "token id " + std::to_string(t) + " is outside the vocabulary"};
  }
  if (!kv_) {
    const int32_t bs = config_.block_size, n_blocks = (config_.max_input_tokens + bs - 1) / bs;
    pages_ = std::make_unique<KvManager>(n_blocks, bs, false);
    kv_ = std::make_unique<KvStorage>(model_.kv_spec(n_blocks, bs, KvType::F16));
    center_keys(*kv_, model_, pool_);
  }
  constexpr int64_t kSeq = 0;
  std::vector<std::vector<float>> out;
  std::vector<float> hidden;  // [pass tokens, n_embd]
  for (const std::vector<int32_t>& tokens : inputs) {
    const int32_t n_total = static_cast<int32_t>(tokens.size());
    std::vector<BlockCopy> copies;
    if (!pages_->allocate(kSeq, 0, n_total, copies)) throw std::logic_error("embedder: KV pages ran out");
    std::vector<float>& v = out.emplace_back(static_cast<size_t>(E), 0.f);  // [n_embd] pooled
    // Passes at fixed offsets (0, max_batch_tokens, ...): the same arithmetic whatever came before.
    for (int32_t start = 0; start < n_total; start += config_.max_batch_tokens) {
      ScheduledChunk c;
      c.seq_id = kSeq;
      c.start = start;
      c.tokens.assign(tokens.begin() + start, tokens.begin() + std::min(n_total, start + config_.max_batch_tokens));
      c.pages = pages_->pages(kSeq);
      const ForwardBatch batch = make_forward_batch(std::span(&c, 1));
      hidden.resize(static_cast<size_t>(batch.n_tokens()) * E);
      model_.hidden_states(pool_, batch.input(), *kv_, hidden.data(), ws_);
      for (int32_t i = 0; i < c.n_tokens(); ++i) {
        const float* h = hidden.data() + static_cast<size_t>(i) * E;
        const int32_t pos = start + i;
        if (config_.pooling == Pooling::Mean) {
          for (int32_t e = 0; e < E; ++e) v[static_cast<size_t>(e)] += h[e];
        } else if ((config_.pooling == Pooling::Cls && pos == 0) || (config_.pooling == Pooling::Last && pos == n_total - 1)) {
          std::copy_n(h, E, v.begin());
        }
      }
    }
    pages_->free(kSeq, {}, 0);
    if (config_.pooling == Pooling::Mean)
      for (float& x : v) x /= static_cast<float>(n_total);
    if (config_.normalize) {
      double norm = 0;
      for (float x : v) norm += static_cast<double>(x) * x;
      const float scale = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.f;
      for (float& x : v) x *= scale;
    }
  }
  return out;
}

}  // namespace kestrel
