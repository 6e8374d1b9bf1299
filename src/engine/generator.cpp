#include "engine/generator.h"

#include <algorithm>

#include "core/timer.h"
#include "model/key_centers.h"

namespace kestrel {
namespace {
int32_t blocks_for(int32_t n_ctx, int32_t block_size) { return (n_ctx + block_size - 1) / block_size; }
constexpr int64_t kSeq = 0;  // the sequence's id with the KV manager
}  // namespace

Generator::Generator(const Model& model, ThreadPool& pool, const GeneratorConfig& config)
    : model_(model),
      config_(config),
      pages_(blocks_for(config.n_ctx, config.block_size), config.block_size, false),
      kv_(model.kv_spec(blocks_for(config.n_ctx, config.block_size), config.block_size, config.kv_types)),
      runner_(model, pool, kv_) {
  center_keys(kv_, model, pool);
}

void Generator::reset() {
  pages_.free(kSeq, {}, 0);
  n_past_ = 0;
  history_.clear();
}

void Generator::truncate(int32_t n) {
  if (n >= n_past_) return;
  pages_.truncate(kSeq, n);
  n_past_ = n;
  history_.resize(static_cast<size_t>(n));
}

Result<std::vector<float>> Generator::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  if (tokens.empty()) return Error{"eval: no tokens"};
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab)
      return Error{"token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")"};
  const int32_t n_total = n_past_ + static_cast<int32_t>(tokens.size());
  if (n_total > config_.n_ctx)
    return Error{"context full: " + std::to_string(n_total) + " tokens exceed the context size " +
                 std::to_string(config_.n_ctx) + " (raise -c/--ctx-size)"};
  std::vector<BlockCopy> copies;  // none: nothing is shared
  if (!pages_.allocate(kSeq, n_past_, n_total, copies))
    return Error{"KV cache has no free pages for " + std::to_string(n_total) + " tokens"};

  const size_t n_rows = all_logits ? tokens.size() : 1;
  std::vector<float> logits(n_rows * static_cast<size_t>(n_vocab));  // [n_rows, n_vocab]
  size_t row_out = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(config_.n_ubatch)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(config_.n_ubatch));
    StepPlan plan;
    ScheduledChunk& c = plan.chunks.emplace_back();
    c.seq_id = kSeq;
    c.start = n_past_;
    c.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin), tokens.begin() + static_cast<std::ptrdiff_t>(end));
    c.pages = pages_.pages(kSeq);
    c.n_logits = all_logits ? c.n_tokens() : end == tokens.size() ? 1 : 0;
    runner_.run(plan, logits.data() + row_out * static_cast<size_t>(n_vocab));
    row_out += static_cast<size_t>(c.n_logits);
    n_past_ += c.n_tokens();
  }
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  return logits;
}

Result<GenerationStats> Generator::generate(const std::vector<int32_t>& prompt, int32_t n_predict, Sampler& sampler,
                                            const std::vector<int32_t>& end_tokens,
                                            const std::function<bool(int32_t)>& on_token) {
  GenerationStats stats;
  stats.n_prompt = static_cast<int32_t>(prompt.size());
  Timer timer;
  auto logits = eval(prompt, false);
  if (!logits.ok()) return Error{logits.error()};
  stats.prompt_s = timer.elapsed_s();
  timer.reset();
  const int32_t n_vocab = model_.hparams().n_vocab;
  std::vector<float> current = std::move(logits).value();
  for (int32_t i = 0; i < n_predict; ++i) {
    const int32_t token = sampler.sample(current.data(), n_vocab, history_);
    if (token < 0) break;  // a grammar that no token can continue
    if (std::find(end_tokens.begin(), end_tokens.end(), token) != end_tokens.end()) break;
    ++stats.n_generated;
    sampler.accept(token);
    if (!on_token(token) || sampler.grammar_finished()) break;
    if (i + 1 == n_predict || n_past_ + 1 > config_.n_ctx) break;
    const int32_t next[1] = {token};
    auto step = eval(next, false);
    if (!step.ok()) return Error{step.error()};
    current = std::move(step).value();
  }
  stats.generate_s = timer.elapsed_s();
  return stats;
}

}  // namespace kestrel
