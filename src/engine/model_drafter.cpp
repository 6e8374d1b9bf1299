#include "engine/model_drafter.h"

#include <algorithm>

#include "model/key_centers.h"

namespace kestrel {

ModelDrafter::ModelDrafter(const Model& draft, ThreadPool& pool, int32_t n_blocks, int32_t block_size, KvTypes kv_types,
                           int32_t max_batch_tokens)
    : model_(draft),
      n_vocab_(draft.hparams().n_vocab),
      max_batch_tokens_(std::max(1, max_batch_tokens)),
      pages_(n_blocks, block_size, false),
      kv_(draft.kv_spec(n_blocks, block_size, kv_types)),
      runner_(draft, pool, kv_) {
  center_keys(kv_, draft, pool);
}

void ModelDrafter::forget(int64_t seq_id) {
  if (pages_.has(seq_id)) pages_.free(seq_id, {}, 0);
  computed_.erase(seq_id);
}

bool ModelDrafter::allocate(int64_t seq_id, int32_t n_computed, int32_t n_total, std::span<const int64_t> keep) {
  std::vector<BlockCopy> copies;  // stays empty: no page is shared
  if (pages_.allocate(seq_id, n_computed, n_total, copies)) return true;
  // Short of pages: sequences not drafting now give theirs up.
  for (auto it = computed_.begin(); it != computed_.end();) {
    if (std::find(keep.begin(), keep.end(), it->first) != keep.end()) {
      ++it;
      continue;
    }
    if (pages_.has(it->first)) pages_.free(it->first, {}, 0);
    it = computed_.erase(it);
  }
  return pages_.allocate(seq_id, n_computed, n_total, copies);
}

int32_t ModelDrafter::propose(std::vector<DraftJob>& jobs) {
  std::vector<int64_t> keep;  // the sequences drafting now
  for (const DraftJob& job : jobs) keep.push_back(job.seq_id);
  std::vector<DraftJob*> live;
  int32_t caught_up = 0;
  for (DraftJob& job : jobs) {
    job.drafts.clear();
    job.dists.clear();
    if (job.k <= 0 || job.tokens.empty()) continue;
    // What the draft computed before stays where it agrees with the sequence (the verification kept
    // some of its drafts and replaced the rest); the last token is always run for its logits.
    std::vector<int32_t>& done = computed_[job.seq_id];
    const size_t agree = static_cast<size_t>(
        std::mismatch(done.begin(), done.end(), job.tokens.begin(), job.tokens.end()).first - done.begin());
    done.resize(std::min(agree, job.tokens.size() - 1));
    pages_.truncate(job.seq_id, static_cast<int32_t>(done.size()));
    live.push_back(&job);
    caught_up += static_cast<int32_t>(job.tokens.size() - done.size());
  }

  // Draws the next draft of job from its logits row [n_vocab] (modified in place).
  const auto draw = [&](DraftJob& job, float* row) {
    std::vector<int32_t> seen(job.tokens.begin(), job.tokens.end());  // penalties see the drafts too
    seen.insert(seen.end(), job.drafts.begin(), job.drafts.end());
    const int32_t token = job.sampler->draw_draft(row, n_vocab_, seen, job.grammar, job.dists);
    if (token < 0) job.k = static_cast<int32_t>(job.drafts.size());  // the grammar allows no token: no more drafts
    else job.drafts.push_back(token);
  };
  // Runs one chunk per job (tokens after what the draft has computed), max_batch_tokens per forward; a
  // job whose chunk reaches its end draws a draft. Returns the jobs still short of tokens.
  const auto run_round = [&](std::vector<DraftJob*> round, auto&& next_tokens) {
    StepPlan plan;
    std::vector<DraftJob*> drawing, unfinished;
    int32_t budget = max_batch_tokens_;
    for (DraftJob* job : round) {
      std::vector<int32_t>& done = computed_[job->seq_id];
      const std::vector<int32_t> want = next_tokens(*job, done);  // tokens still to run
      const auto n_done = static_cast<int32_t>(done.size());
      const int32_t n = std::min(static_cast<int32_t>(want.size()), budget);
      if (n <= 0) {
        unfinished.push_back(job);
        continue;
      }
      if (!allocate(job->seq_id, n_done, n_done + n, keep)) {
        forget(job->seq_id);  // no room even alone: this job drafts no further
        continue;
      }
      ScheduledChunk& c = plan.chunks.emplace_back();
      c.seq_id = job->seq_id;
      c.start = n_done;
      c.tokens.assign(want.begin(), want.begin() + n);
      c.pages = pages_.pages(job->seq_id);
      c.n_logits = n == static_cast<int32_t>(want.size()) ? 1 : 0;
      done.insert(done.end(), c.tokens.begin(), c.tokens.end());
      (c.n_logits ? drawing : unfinished).push_back(job);
      budget -= n;
    }
    if (plan.empty()) return std::vector<DraftJob*>{};
    std::vector<float> logits = runner_.run(plan);  // [drawing.size(), n_vocab]
    for (size_t i = 0; i < drawing.size(); ++i) draw(*drawing[i], logits.data() + i * static_cast<size_t>(n_vocab_));
    return unfinished;
  };

  // Catch up with every sequence (its first draft comes from its last token's logits).
  const auto catch_up = [](const DraftJob& job, const std::vector<int32_t>& done) {
    return std::vector<int32_t>(job.tokens.begin() + static_cast<std::ptrdiff_t>(done.size()), job.tokens.end());
  };
  for (std::vector<DraftJob*> pending = live; !pending.empty();) pending = run_round(pending, catch_up);
  // Then one token per forward: each draft is run to draw the next.
  const auto last_draft = [](const DraftJob& job, const std::vector<int32_t>&) { return std::vector<int32_t>{job.drafts.back()}; };
  for (;;) {
    std::vector<DraftJob*> round;
    for (DraftJob* job : live)
      if (!job->drafts.empty() && static_cast<int32_t>(job->drafts.size()) < job->k && computed_.count(job->seq_id))
        round.push_back(job);
    if (round.empty()) break;
    run_round(round, last_draft);
  }
  return caught_up;
}

}  // namespace kestrel
