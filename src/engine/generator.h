// Single-sequence generation over the paged KV cache: evaluate tokens (prefill in micro-batches, then one
// token per step), sample, stop on end-of-generation or length. Its steps are step plans of one chunk run
// by the same ModelRunner as the serving engine's (many sequences, scheduler).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace kestrel {

struct GeneratorConfig {
  int32_t n_ctx = 2048;      // most tokens the sequence may hold (KV pages are sized for this)
  int32_t block_size = 16;   // tokens per KV page
  int32_t n_ubatch = 512;    // most tokens per forward during prefill
  KvTypes kv_types = KvType::F16;  // element type of the KV pages
};

struct GenerationStats {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  double prompt_s = 0;
  double generate_s = 0;
};

class Generator {
 public:
  Generator(const Model& model, ThreadPool& pool, const GeneratorConfig& config);

  // Appends tokens to the sequence and runs them; returns logits [n_rows, n_vocab] where n_rows is
  // tokens.size() when all_logits, else 1 (the last token). Error when the context would overflow or a
  // token id is outside the vocabulary.
  Result<std::vector<float>> eval(std::span<const int32_t> tokens, bool all_logits);

  // Prefill the prompt, then sample up to n_predict tokens; on_token(id) returns false to stop early.
  // Stops before emitting any of end_tokens (end of generation) unless that list is empty.
  Result<GenerationStats> generate(const std::vector<int32_t>& prompt, int32_t n_predict, Sampler& sampler,
                                   const std::vector<int32_t>& end_tokens,
                                   const std::function<bool(int32_t)>& on_token);

  // Forget the sequence and return its pages.
  void reset();
  // Keep the first n tokens only (n <= n_past): later positions' pages go back (speculative rollback).
  void truncate(int32_t n);
  int32_t n_past() const { return n_past_; }
  int32_t n_ctx() const { return config_.n_ctx; }
  const std::vector<int32_t>& history() const { return history_; }
  const BlockPool& block_pool() const { return pages_.pool(); }

 private:
  const Model& model_;
  GeneratorConfig config_;
  KvManager pages_;  // the one sequence's pages (no prefix cache)
  KvStorage kv_;
  ModelRunner runner_;
  int32_t n_past_ = 0;
  std::vector<int32_t> history_;
};

}  // namespace kestrel
