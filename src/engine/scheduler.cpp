#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace kestrel {

Scheduler::Scheduler(KvManager& kv, const SchedulerConfig& config) : kv_(kv), config_(config) {
  assert(kv.block_size() == config.block_size);
}

void Scheduler::add(Sequence seq) {
  assert(!seqs_.count(seq.id));
  seq.n_prompt = seq.n_tokens();
  seq.n_computed = 0;
  seq.status = SequenceStatus::Waiting;
  seq.arrival = next_arrival_++;
  last_arrival_ms_ = seq.arrival_ms;
  const int64_t id = seq.id;
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
}

bool Scheduler::add_prefilled(const Sequence& prefilled) {
  assert(!seqs_.count(prefilled.id));
  if (static_cast<int32_t>(running_.size()) >= config_.max_running) return false;
  std::vector<BlockCopy> copies;  // none: a new sequence shares no page
  if (!kv_.allocate(prefilled.id, 0, prefilled.n_tokens(), copies)) return false;
  Sequence seq = prefilled;
  seq.n_prompt = seq.n_computed = seq.n_tokens();
  seq.status = SequenceStatus::Running;
  seq.arrival = next_arrival_++;
  running_.push_back(seq.id);
  seqs_.emplace(seq.id, std::move(seq));
  return true;
}

Sequence* Scheduler::find(int64_t id) {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

Sequence* Scheduler::fork(int64_t parent_id, int64_t child_id) {
  Sequence* parent = find(parent_id);
  if (!parent || parent->status != SequenceStatus::Running || seqs_.count(child_id)) return nullptr;
  Sequence child;
  child.id = child_id;
  child.tokens = parent->tokens;
  child.n_prompt = parent->n_prompt;
  child.n_computed = parent->n_computed;
  child.cache_salt = parent->cache_salt;
  child.status = SequenceStatus::Running;
  child.arrival = parent->arrival;
  child.arrival_ms = parent->arrival_ms;
  child.n_cached_prompt = parent->n_cached_prompt;
  kv_.fork(parent_id, child_id);
  running_.push_back(child_id);
  return &seqs_.emplace(child_id, std::move(child)).first->second;
}

const Sequence* Scheduler::find(int64_t id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void Scheduler::add_chunk(const Sequence& seq, int32_t n_new, StepPlan& plan) const {
  ScheduledChunk c;
  c.seq_id = seq.id;
  c.start = seq.n_computed;
  c.tokens.assign(seq.tokens.begin() + seq.n_computed, seq.tokens.begin() + seq.n_computed + n_new);
  c.pages = kv_.pages(seq.id);
  c.n_logits = seq.n_computed + n_new == seq.n_tokens() ? 1 : 0;  // it reaches the end: sample the next token
  plan.chunks.push_back(std::move(c));
}

void Scheduler::preempt(Sequence& seq, StepPlan& plan) {
  kv_.free(seq.id, seq.tokens, 0);  // computed full pages stay cached
  seq.n_computed = 0;
  seq.drafts.clear();
  seq.status = SequenceStatus::Waiting;
  seq.n_skipped = config_.max_skips;  // it was running: it goes first when memory allows
  ++seq.n_preemptions;
  ++n_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq.id));
  waiting_.push_front(seq.id);
  plan.preempted.push_back(seq.id);
  if (config_.policy != BatchPolicy::Continuous) ++batch_quota_;  // it rejoins its batch
}

PromptMatch Scheduler::match(const Sequence& seq) const {
  return kv_.match(seq.tokens, seq.cache_salt, seq.n_tokens() - 1);
}

bool Scheduler::admit(Sequence& seq, PromptMatch match, int32_t& budget, StepPlan& plan) {
  if (!kv_.is_current(match)) match = this->match(seq);  // sequences admitted before it changed the tree
  if (match.pending_ahead()) return false;
  const int32_t n_new = std::min(seq.n_tokens() - match.n_tokens, budget);
  if (n_new <= 0 || !kv_.can_admit(match, match.n_tokens + n_new)) return false;
  seq.n_computed = kv_.admit(seq.id, seq.cache_salt, match, match.n_tokens + n_new, plan.copies);
  seq.n_cached_prompt = seq.n_computed;
  seq.status = SequenceStatus::Running;
  seq.n_skipped = 0;
  publish(seq);
  add_chunk(seq, n_new, plan);
  budget -= n_new;
  return true;
}

bool Scheduler::batch_ready(double now_ms) const {
  if (waiting_.empty()) return false;
  if (static_cast<int32_t>(waiting_.size()) >= config_.batch_size) return true;
  if (config_.policy == BatchPolicy::Dynamic) {
    double oldest = std::numeric_limits<double>::max();
    for (int64_t id : waiting_) oldest = std::min(oldest, seqs_.at(id).arrival_ms);
    return now_ms - oldest >= config_.batch_wait_ms;
  }
  // Static: a trailing partial batch runs once nothing has arrived for batch_wait_ms.
  return now_ms - last_arrival_ms_ >= config_.batch_wait_ms;
}

StepPlan Scheduler::schedule(double now_ms) {
  StepPlan plan;
  int32_t budget = config_.max_batch_tokens;
  if (config_.policy == BatchPolicy::Continuous) {
    batch_quota_ = std::numeric_limits<int32_t>::max();
  } else if (running_.empty() && batch_quota_ <= 0 && batch_ready(now_ms)) {
    batch_quota_ = std::min(config_.batch_size, static_cast<int32_t>(waiting_.size()));
  }

  // Running sequences, oldest admission first; when blocks run out the newest ones give theirs up.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = seqs_.at(running_[i]);
    int32_t n_new = std::min(seq.n_tokens() - seq.n_computed, budget);
    if (n_new <= 0) continue;
    bool scheduled = true;
    const size_t n_pages_before = kv_.pages(seq.id).size();
    while (!kv_.allocate(seq.id, seq.n_computed, seq.n_computed + n_new, plan.copies)) {
      if (running_.back() != seq.id) {
        preempt(seqs_.at(running_.back()), plan);
      } else if (const int32_t fits = std::min(kv_.room(seq.id, seq.n_computed), n_new); fits > 0 && fits < n_new) {
        n_new = fits;  // the newest sequence takes a shorter chunk
      } else {
        preempt(seq, plan);
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    if (kv_.pages(seq.id).size() != n_pages_before) publish(seq);  // register its new pages as pending
    add_chunk(seq, n_new, plan);
    budget -= n_new;
  }
  add_drafts(budget, plan);

  // Waiting sequences join: aged ones first in arrival order, then the longest cached prefix first.
  if (budget > 0 && batch_quota_ > 0 && !waiting_.empty()) {
    struct Candidate {
      bool aged;
      PromptMatch match;  // the prefix tree is walked once per candidate (again only if it changes)
      int64_t arrival, id;
    };
    std::vector<Candidate> order;
    for (int64_t id : waiting_) {
      const Sequence& seq = seqs_.at(id);
      PromptMatch m = match(seq);
      if (m.pending_ahead()) continue;  // waits for pages another sequence is computing
      order.push_back({seq.n_skipped >= config_.max_skips, std::move(m), seq.arrival, id});
    }
    std::sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) {
      if (a.aged != b.aged) return a.aged;
      if (!a.aged && a.match.n_tokens != b.match.n_tokens) return a.match.n_tokens > b.match.n_tokens;
      return a.arrival < b.arrival;
    });
    int64_t latest_admitted = -1;
    for (const Candidate& c : order) {
      if (budget <= 0 || batch_quota_ <= 0 || static_cast<int32_t>(running_.size()) >= config_.max_running) break;
      Sequence& seq = seqs_.at(c.id);
      if (!admit(seq, c.match, budget, plan)) break;  // out of pages: later candidates wait too
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), c.id));
      running_.push_back(c.id);
      --batch_quota_;
      latest_admitted = std::max(latest_admitted, seq.arrival);
    }
    for (int64_t id : waiting_) {
      Sequence& seq = seqs_.at(id);
      if (seq.arrival < latest_admitted) ++seq.n_skipped;
    }
  }
  return plan;
}

void Scheduler::add_drafts(int32_t& budget, StepPlan& plan) {
  std::vector<int64_t> drafting;
  for (ScheduledChunk& c : plan.chunks) {
    Sequence& seq = seqs_.at(c.seq_id);
    if (seq.drafts.empty()) continue;
    // Only a decode (its one pending token) verifies drafts; they get what budget and free pages are left.
    const int32_t pending = c.start + c.n_tokens();
    int32_t k = c.n_tokens() == 1 && pending == seq.n_tokens() ? static_cast<int32_t>(seq.drafts.size()) : 0;
    k = std::min({k, budget, kv_.room(seq.id, pending)});
    if (k <= 0 || !kv_.allocate(seq.id, pending, pending + k, plan.copies)) continue;
    seq.drafts.resize(static_cast<size_t>(k));
    c.tokens.insert(c.tokens.end(), seq.drafts.begin(), seq.drafts.end());
    c.pages = kv_.pages(seq.id);
    c.n_logits = 1 + k;
    budget -= k;
    drafting.push_back(seq.id);
  }
  // Drafts not run now are dropped (the engine proposes afresh each step).
  for (int64_t id : running_)
    if (std::find(drafting.begin(), drafting.end(), id) == drafting.end()) seqs_.at(id).drafts.clear();
}

void Scheduler::set_drafts(int64_t id, std::vector<int32_t> drafts) {
  Sequence* seq = find(id);
  if (seq && seq->status == SequenceStatus::Running && seq->n_tokens() - seq->n_computed == 1) seq->drafts = std::move(drafts);
}

void Scheduler::accept_drafts(int64_t id, int32_t n_kept) {
  Sequence* seq = find(id);
  if (!seq || seq->drafts.empty()) return;
  n_kept = std::clamp(n_kept, 0, static_cast<int32_t>(seq->drafts.size()));
  const int32_t before = seq->n_computed;
  seq->tokens.insert(seq->tokens.end(), seq->drafts.begin(), seq->drafts.begin() + n_kept);
  seq->n_computed += n_kept;
  seq->drafts.clear();
  kv_.truncate(id, seq->n_computed);  // the rejected drafts' pages go back, never published
  if (before / config_.block_size != seq->n_computed / config_.block_size) publish(*seq);
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* seq = find(c.seq_id);
    if (!seq || seq->status != SequenceStatus::Running) continue;
    // Drafts run in the chunk join the computed tokens only once verified (accept_drafts).
    seq->n_computed = c.start + c.n_tokens() - static_cast<int32_t>(seq->drafts.size());
    // Pages become ready only when a chunk completes one; the tree is walked only then.
    if (c.start / config_.block_size != seq->n_computed / config_.block_size) publish(*seq);
  }
  kv_.commit_copies();
}

void Scheduler::append_token(int64_t id, int32_t token) {
  if (Sequence* seq = find(id)) seq->tokens.push_back(token);
}

void Scheduler::finish(int64_t id) {
  Sequence* seq = find(id);
  if (!seq) return;
  // A running sequence's computed tail stays cached too.
  kv_.free(id, seq->tokens, seq->status == SequenceStatus::Running ? seq->n_computed : 0);
  if (seq->status == SequenceStatus::Running) running_.erase(std::find(running_.begin(), running_.end(), id));
  if (seq->status == SequenceStatus::Waiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  seqs_.erase(id);
}

}  // namespace kestrel
