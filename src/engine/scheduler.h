// Which tokens of which sequences run in the next forward pass. Plain integers: token ids, block ids and
// counters, testable without a model.
//
// Continuous (in-flight) batching, the default: every step, running sequences go first in admission order
// (a decode is one token, an unfinished prompt gets the next chunk), then waiting sequences join while the
// step's token budget, the running-set limit and the free blocks allow. Prompts are cut into chunks so a
// long prompt never stalls the decodes, and several prompts can be part-way at once. Waiting sequences
// with the longest cached prefix go first, except that one passed over max_skips times goes first in
// arrival order (aging). A sequence whose prompt continues into blocks another sequence is computing right
// now waits for them rather than computing them twice.
// When a running sequence needs a block and none is left, the most recently admitted sequence is preempted:
// its blocks go back (computed full ones stay in the prefix cache) and it rejoins the front of the queue to
// be recomputed; its tokens, generated ones included, are kept, so its output is unchanged.
// Static and dynamic batching, for comparison: a batch is formed when batch_size sequences wait (static),
// or when batch_size wait or the oldest has waited batch_wait_ms (dynamic); it runs to completion before
// the next is formed.
//
// Speculative decoding: a decoding sequence given drafts (set_drafts) runs its pending token and the
// drafts in one chunk whose every row returns logits, when the step's token budget and the free pages
// allow after every running sequence got its own token (drafts never preempt anyone, and are cut to
// fit); accept_drafts() then keeps the verified prefix and gives the rest of the pages back.
//
// The scheduler decides; the KV manager (kv/kv_manager.h) owns the pages: the scheduler asks it what a
// prompt finds cached and how many tokens a sequence can add, and never reads a reference count.
//
// Contract: one thread calls everything. After schedule(), the caller runs the plan's copies and its
// forward (the plan is self-contained: step_plan.h), then calls commit(plan) before anything else.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "kv/kv_manager.h"

namespace kestrel {

enum class BatchPolicy { Continuous, Static, Dynamic };

struct SchedulerConfig {
  int32_t block_size = 16;
  int32_t max_batch_tokens = 512;  // token budget of one step
  int32_t max_running = 16;        // sequences in the running set at once
  BatchPolicy policy = BatchPolicy::Continuous;
  int32_t batch_size = 8;          // static and dynamic batching: sequences per batch
  double batch_wait_ms = 100;      // dynamic batching: the longest the oldest request waits for a batch to fill
  int32_t max_skips = 16;          // aging: after this many steps passed over, a request goes first
};

class Scheduler {
 public:
  // kv must outlive the scheduler; its page size is config.block_size.
  Scheduler(KvManager& kv, const SchedulerConfig& config);

  // Queues a sequence (tokens holds its prompt; n_prompt is set from it). Its id must be new.
  void add(Sequence seq);
  // A sequence whose prompt's KV was computed elsewhere (prefill/decode disaggregation): it joins the
  // running set with pages of its own for positions [0, n_tokens), n_computed = n_tokens (the caller
  // fills the pages, then appends its first token). False (nothing changed) while the running set is
  // full or pages are short. Its id must be new.
  bool add_prefilled(const Sequence& seq);
  // A new running sequence sharing every block of the running sequence `parent` (n > 1 sampling); a
  // block both will write is copied first (copy-on-write). Returns the child, or null if parent is not running.
  Sequence* fork(int64_t parent, int64_t child_id);

  StepPlan schedule(double now_ms);
  void commit(const StepPlan& plan);

  // Before schedule(): drafts to verify in the next step (a running sequence with one pending token).
  void set_drafts(int64_t id, std::vector<int32_t> drafts);
  // After commit, for a chunk that ran drafts: the first n_kept of them join the sequence (their KV stays),
  // the others' pages go back.
  void accept_drafts(int64_t id, int32_t n_kept);
  // After commit: a sequence whose chunk sampled gets its new token.
  void append_token(int64_t id, int32_t token);
  // Finished or cancelled: its pages go back (computed ones stay cached) and it is forgotten.
  void finish(int64_t id);

  Sequence* find(int64_t id);
  const Sequence* find(int64_t id) const;
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  const std::vector<int64_t>& running_ids() const { return running_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t n_preemptions() const { return n_preemptions_; }

 private:
  bool batch_ready(double now_ms) const;
  PromptMatch match(const Sequence& seq) const;  // its prompt in the prefix cache (all but the last token)
  bool admit(Sequence& seq, PromptMatch match, int32_t& budget, StepPlan& plan);
  void preempt(Sequence& seq, StepPlan& plan);
  void publish(const Sequence& seq) { kv_.publish(seq.id, seq.tokens, seq.n_computed); }
  void add_chunk(const Sequence& seq, int32_t n_new, StepPlan& plan) const;
  void add_drafts(int32_t& budget, StepPlan& plan);

  KvManager& kv_;
  SchedulerConfig config_;
  std::map<int64_t, Sequence> seqs_;
  std::deque<int64_t> waiting_;  // ids, queue order
  std::vector<int64_t> running_;  // ids, admission order
  int64_t next_arrival_ = 0;
  double last_arrival_ms_ = 0;
  int32_t batch_quota_ = 0;  // sequences that may still join the current batch
  int64_t n_preemptions_ = 0;
};

}  // namespace kestrel
