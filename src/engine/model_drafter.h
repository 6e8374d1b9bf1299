// Draft-model proposals for many sequences at once (speculative decoding in the serving engine): the
// draft model keeps its own paged KV per sequence, catches up with each sequence's new tokens in one
// batched forward, then drafts token by token, all sequences in each forward. Its KV survives between
// steps: after verification only the part that disagrees with the sequence is recomputed.
//
// Contract: one thread makes every call. Sequence ids are the engine's; forget() an id when its
// sequence ends. When the draft's pages run out, sequences not drafting in this call lose their draft
// KV (rebuilt when they draft again), and a sequence that still does not fit gets no drafts.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace kestrel {

struct DraftJob {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;        // the sequence so far (the target has not computed its last token)
  int32_t k = 0;                          // drafts wanted
  Sampler* sampler = nullptr;             // draws the drafts; its distributions are kept for verification
  GrammarState grammar;                   // under the sampler's grammar: the state after `tokens` (drafts
                                          // follow it; drafting stops where it allows no token)
  std::vector<int32_t> drafts;            // out: [<= k]
  std::vector<TokenDistribution> dists;   // out: [drafts.size()] the distribution each draft was drawn from
};

class ModelDrafter {
 public:
  // n_blocks pages of block_size tokens for the draft's KV; most tokens per forward: max_batch_tokens.
  ModelDrafter(const Model& draft, ThreadPool& pool, int32_t n_blocks, int32_t block_size, KvTypes kv_types,
               int32_t max_batch_tokens);

  // Returns the tokens run to catch up (a new sequence's whole prompt, else one or two per job).
  int32_t propose(std::vector<DraftJob>& jobs);
  void forget(int64_t seq_id);

 private:
  // The job's sequence computed up to all but its last `missing` tokens, pages for them allocated.
  // False when the draft's pages cannot hold it.
  bool prepare(const DraftJob& job, std::span<const int64_t> keep);
  bool allocate(int64_t seq_id, int32_t n_computed, int32_t n_total, std::span<const int64_t> keep);

  const Model& model_;
  int32_t n_vocab_;
  int32_t max_batch_tokens_;
  KvManager pages_;
  KvStorage kv_;
  ModelRunner runner_;
  std::map<int64_t, std::vector<int32_t>> computed_;  // per sequence: the tokens whose draft KV is cached
};

}  // namespace kestrel
