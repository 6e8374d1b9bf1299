// Speculative decoding for one sequence (`kestrel generate`, `kestrel bench`): a drafter proposes up to K
// tokens (a small draft model with its own paged KV, or n-gram lookup in the sequence's own tokens), the
// target scores the pending token and all K drafts in one forward (K + 1 rows: decode is memory-bound, so
// they cost little more than one), verification (spec/verify.h) keeps a prefix of the drafts and adds the
// target's own next token, and both KV caches roll back past what was kept. The output is the target's
// alone: identical tokens when greedy, the same distribution when sampling.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/generator.h"
#include "spec/spec_config.h"
#include "spec/spec_stats.h"

namespace kestrel {

// Whether speculation can run: a drafter (a draft model, or n-gram drafting), valid lengths, and a draft
// model with the target's vocabulary size (the CLI also compares the vocabularies themselves).
Status check_speculation(const Model& target, const Model* draft, const SpeculativeConfig& spec);

class SpeculativeGenerator {
 public:
  // draft: the draft model, or null for n-gram drafting (config.ngram > 0). Error when neither, or when
  // the two models' vocabularies differ in size.
  static Result<std::unique_ptr<SpeculativeGenerator>> create(const Model& target, const Model* draft, ThreadPool& pool,
                                                              const GeneratorConfig& config, const SpeculativeConfig& spec);

  // As Generator::generate, with speculation.
  Result<GenerationStats> generate(const std::vector<int32_t>& prompt, int32_t n_predict, Sampler& sampler,
                                   const std::vector<int32_t>& end_tokens, const std::function<bool(int32_t)>& on_token);
  const SpecStats& stats() const { return stats_; }
  // Target forwards of the last generate() after the prompt's (each yields one token or more).
  int64_t target_forwards() const { return target_forwards_; }
  void reset();

 private:
  SpeculativeGenerator(const Model& target, const Model* draft, ThreadPool& pool, const GeneratorConfig& config,
                       const SpeculativeConfig& spec);
  // Up to k drafts continuing history (whose last token the target has not computed yet); dists gets the
  // draft model's distribution at each (n-gram: left empty). Under a grammar the draft model's drafts
  // follow it from `grammar` (the state after history) and stop where it allows no token.
  Result<std::vector<int32_t>> propose(const std::vector<int32_t>& history, GrammarState grammar, int32_t k,
                                       std::vector<TokenDistribution>& dists);

  SpeculativeConfig spec_;
  int32_t n_vocab_;
  Generator target_;
  std::unique_ptr<Generator> draft_;  // null: n-gram drafting
  std::unique_ptr<Sampler> draft_sampler_;
  SpecStats stats_;
  int64_t target_forwards_ = 0;
};

}  // namespace kestrel
