#include "engine/speculative_generator.h"

#include <algorithm>

#include "core/timer.h"
#include "spec/ngram_drafter.h"
#include "spec/verify.h"

namespace kestrel {

Status check_speculation(const Model& target, const Model* draft, const SpeculativeConfig& spec) {
  if (!draft && spec.ngram <= 0) return Error{"speculative decoding needs a draft model or n-gram drafting"};
  if (Status s = spec.validate(); !s.ok()) return Error{s.error()};
  if (draft && draft->hparams().n_vocab != target.hparams().n_vocab)
    return Error{"the draft model's vocabulary has " + std::to_string(draft->hparams().n_vocab) +
                 " tokens and the target's " + std::to_string(target.hparams().n_vocab) + ": they must be the same"};
  return {};
}

Result<std::unique_ptr<SpeculativeGenerator>> SpeculativeGenerator::create(const Model& target, const Model* draft,
                                                                            ThreadPool& pool, const GeneratorConfig& config,
                                                                            const SpeculativeConfig& spec) {
  if (Status s = check_speculation(target, draft, spec); !s.ok()) return Error{s.error()};
  return std::unique_ptr<SpeculativeGenerator>(new SpeculativeGenerator(target, draft, pool, config, spec));
}

SpeculativeGenerator::SpeculativeGenerator(const Model& target, const Model* draft, ThreadPool& pool,
                                           const GeneratorConfig& config, const SpeculativeConfig& spec)
    : spec_(spec),
      n_vocab_(target.hparams().n_vocab),
      target_(target, pool, config),
      draft_(draft ? std::make_unique<Generator>(*draft, pool, config) : nullptr) {}

void SpeculativeGenerator::reset() {
  target_.reset();
  if (draft_) draft_->reset();
  stats_ = SpecStats{};
  target_forwards_ = 0;
}

Result<std::vector<int32_t>> SpeculativeGenerator::propose(const std::vector<int32_t>& history, GrammarState grammar,
                                                           int32_t k, std::vector<TokenDistribution>& dists) {
  if (!draft_) return ngram_draft(history, spec_.ngram, k);
  // The draft catches up with the sequence (tokens it kept and the pending one), then drafts k tokens,
  // evaluating each but the last.
  const auto have = static_cast<size_t>(draft_->n_past());
  auto logits = draft_->eval(std::span<const int32_t>(history).subspan(have), false);
  if (!logits.ok()) return Error{logits.error()};
  std::vector<float> row = std::move(logits).value();  // [n_vocab]
  std::vector<int32_t> drafts, seen = history;
  for (int32_t i = 0; i < k; ++i) {
    const int32_t token = draft_sampler_->draw_draft(row.data(), n_vocab_, seen, grammar, dists);
    if (token < 0) break;  // the grammar allows no token
    drafts.push_back(token);
    seen.push_back(token);
    if (i + 1 == k) break;
    const int32_t next[1] = {drafts.back()};
    auto step = draft_->eval(next, false);
    if (!step.ok()) return Error{step.error()};
    row = std::move(step).value();
  }
  return drafts;
}

Result<GenerationStats> SpeculativeGenerator::generate(const std::vector<int32_t>& prompt, int32_t n_predict,
                                                       Sampler& sampler, const std::vector<int32_t>& end_tokens,
                                                       const std::function<bool(int32_t)>& on_token) {
  reset();
  GenerationStats stats;
  stats.n_prompt = static_cast<int32_t>(prompt.size());
  Timer timer;
  auto logits = target_.eval(prompt, false);
  if (!logits.ok()) return Error{logits.error()};
  if (draft_) {
    auto d = draft_->eval(prompt, false);
    if (!d.ok()) return Error{"draft model: " + d.error()};
    SamplingParams params = sampler.params();
    params.seed = choice_seed(params.seed, 1);  // its own RNG stream
    draft_sampler_ = std::make_unique<Sampler>(params);
  }
  stats.prompt_s = timer.elapsed_s();
  timer.reset();

  std::vector<int32_t> history = prompt;  // the sequence; the target's KV holds all but its last token
  // Emits a token; false when generation ends (an end token, which is not emitted, -1 where the grammar
  // allows no token, the caller, n_predict, or the end of the grammar).
  const auto emit = [&](int32_t token) {
    if (token < 0 || std::find(end_tokens.begin(), end_tokens.end(), token) != end_tokens.end()) return false;
    ++stats.n_generated;
    history.push_back(token);
    sampler.accept(token);
    return on_token(token) && stats.n_generated < n_predict && !sampler.grammar_finished();
  };
  bool go = emit(sampler.sample(logits.value().data(), n_vocab_, history));
  AdaptiveDraftLength draft_length(spec_.draft_min, spec_.draft_max);
  while (go && target_.n_past() + 1 <= target_.n_ctx()) {
    int32_t k = spec_.adaptive ? draft_length.next() : spec_.draft_max;
    k = std::min({k, n_predict - stats.n_generated - 1, target_.n_ctx() - target_.n_past() - 1});
    std::vector<TokenDistribution> dists;  // [K] the draft model's, empty for n-gram drafts
    std::vector<int32_t> drafts;           // [K]
    if (k > 0) {
      auto proposed = propose(history, sampler.grammar_state(), k, dists);
      if (!proposed.ok()) return Error{proposed.error()};
      drafts = std::move(proposed).value();
      if (static_cast<int32_t>(drafts.size()) < spec_.draft_min) drafts.clear(), dists.clear();
    }
    const auto n_drafts = static_cast<int32_t>(drafts.size());
    std::vector<int32_t> batch{history.back()};  // the pending token, then the drafts
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    auto rows = target_.eval(batch, true);  // [K + 1, n_vocab]
    if (!rows.ok()) return Error{rows.error()};
    ++target_forwards_;
    const Verification v = verify_drafts(drafts, dists, rows.value().data(), n_vocab_, history, sampler);
    // Roll back past what was kept: the target computed the pending token and K drafts, the draft model
    // the sequence and K - 1 drafts.
    target_.truncate(target_.n_past() - (n_drafts - v.n_accepted));
    if (draft_) draft_->truncate(std::min(draft_->n_past(), static_cast<int32_t>(history.size()) + v.n_accepted));
    if (n_drafts > 0) {
      stats_.record(n_drafts, v.n_accepted);
      draft_length.update(n_drafts, v.n_accepted);
    }
    for (int32_t i = 0; i < v.n_accepted && go; ++i) go = emit(drafts[static_cast<size_t>(i)]);
    if (go) go = emit(v.next);
  }
  stats.generate_s = timer.elapsed_s();
  return stats;
}

}  // namespace kestrel
