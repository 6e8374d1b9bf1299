#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace kestrel {
namespace {
int32_t blocks_for(int32_t n_tokens, int32_t block_size) { return (n_tokens + block_size - 1) / block_size; }
}  // namespace

int32_t StepPlan::n_tokens() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.n_tokens;
  return n;
}

Scheduler::Scheduler(BlockPool& pool, PrefixCache* cache, const SchedulerConfig& config)
    : pool_(pool), cache_(cache), config_(config) {
  assert(!cache || cache->block_size() == config.block_size);
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
  for (int32_t b : parent->table.ids()) {
    pool_.retain(b);
    child.table.append(b);
  }
  running_.push_back(child_id);
  return &seqs_.emplace(child_id, std::move(child)).first->second;
}

const Sequence* Scheduler::find(int64_t id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void Scheduler::release_blocks(Sequence& seq) {
  if (cache_) cache_->abandon(seq.table.ids());
  seq.table.release_all(pool_);
}

void Scheduler::publish(const Sequence& seq) {
  if (!cache_) return;
  const int32_t bs = config_.block_size;
  const size_t n_full = std::min(seq.table.ids().size(), static_cast<size_t>(seq.n_tokens() / bs));
  cache_->insert(seq.tokens, std::span<const int32_t>(seq.table.ids()).first(n_full), seq.n_computed / bs,
                 seq.cache_salt);
}

int32_t Scheduler::room(const Sequence& seq) const {
  const int32_t bs = config_.block_size;
  const size_t bi = static_cast<size_t>(seq.n_computed / bs);
  const bool cow = bi < seq.table.ids().size() && pool_.ref_count(seq.table.ids()[bi]) > 1;
  const int32_t blocks = static_cast<int32_t>(seq.table.ids().size()) + pool_.n_available() - (cow ? 1 : 0);
  return std::max(0, blocks * bs - seq.n_computed);
}

bool Scheduler::grow(Sequence& seq, int32_t n_new, StepPlan& plan) {
  const int32_t bs = config_.block_size;
  if (room(seq) < n_new) return false;
  // Copy-on-write: the block receiving position n_computed is shared with a fork.
  const size_t bi = static_cast<size_t>(seq.n_computed / bs);
  if (bi < seq.table.ids().size() && pool_.ref_count(seq.table.ids()[bi]) > 1) {
    const int32_t shared = seq.table.ids()[bi];
    const int32_t own = *pool_.allocate();
    plan.copies.push_back({shared, own});
    seq.table.replace(bi, own);
    pool_.release(shared);
  }
  const bool ok = seq.table.reserve(pool_, seq.n_computed + n_new, bs);
  assert(ok);
  (void)ok;
  return true;
}

void Scheduler::preempt(Sequence& seq, StepPlan& plan) {
  release_blocks(seq);
  seq.n_computed = 0;
  seq.status = SequenceStatus::Waiting;
  seq.n_skipped = config_.max_skips;  // it was running: it goes first when memory allows
  ++seq.n_preemptions;
  ++n_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq.id));
  waiting_.push_front(seq.id);
  plan.preempted.push_back(seq.id);
  if (config_.policy != BatchPolicy::Continuous) ++batch_quota_;  // it rejoins its batch
}

int32_t Scheduler::lookup_length(const Sequence& seq) {
  if (!cache_) return 0;
  const PrefixMatch m = cache_->lookup(seq.tokens, seq.cache_salt, seq.n_tokens() - 1, false);
  return m.pending_ahead ? -1 : m.n_tokens(config_.block_size);
}

bool Scheduler::admit(Sequence& seq, int32_t& budget, StepPlan& plan) {
  const int32_t bs = config_.block_size;
  PrefixMatch probe;
  if (cache_) probe = cache_->lookup(seq.tokens, seq.cache_salt, seq.n_tokens() - 1, false);
  if (probe.pending_ahead) return false;
  // Blocks left once the matched ones (cached, unreferenced ones leave the evictable set) are taken.
  int32_t available = pool_.n_available();
  for (int32_t b : probe.blocks) available -= pool_.ref_count(b) == 0 ? 1 : 0;
  if (probe.partial_block >= 0 && pool_.ref_count(probe.partial_block) == 0) --available;
  const int32_t n_matched = probe.n_tokens(bs);
  const int32_t n_new = std::min(seq.n_tokens() - n_matched, budget);
  const int32_t first_new_block = static_cast<int32_t>(probe.blocks.size());  // the partial copy's dst or a fresh one
  const int32_t need = blocks_for(n_matched + n_new, bs) - first_new_block;
  if (need > available || n_new <= 0) return false;

  if (cache_) {
    const PrefixMatch match = cache_->lookup(seq.tokens, seq.cache_salt, seq.n_tokens() - 1, true);
    for (int32_t b : match.blocks) seq.table.append(b);
    seq.n_computed = static_cast<int32_t>(match.blocks.size()) * bs;
    if (match.partial_block >= 0) {
      const int32_t own = *pool_.allocate();
      plan.copies.push_back({match.partial_block, own});
      copy_sources_.push_back(match.partial_block);  // released at commit, after the copy ran
      seq.table.append(own);
      seq.n_computed += match.partial_tokens;
    }
  }
  seq.n_cached_prompt = seq.n_computed;
  const bool ok = grow(seq, n_new, plan);
  assert(ok);
  (void)ok;
  seq.status = SequenceStatus::Running;
  seq.n_skipped = 0;
  publish(seq);
  plan.chunks.push_back({seq.id, seq.n_computed, n_new, seq.n_computed + n_new == seq.n_tokens()});
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
    const size_t n_blocks_before = seq.table.ids().size();
    while (!grow(seq, n_new, plan)) {
      if (running_.back() != seq.id) {
        preempt(seqs_.at(running_.back()), plan);
      } else if (const int32_t fits = std::min(room(seq), n_new); fits > 0 && fits < n_new) {
        n_new = fits;  // the newest sequence takes a shorter chunk
      } else {
        preempt(seq, plan);
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    if (seq.table.ids().size() != n_blocks_before) publish(seq);  // register its new pages as pending
    plan.chunks.push_back({seq.id, seq.n_computed, n_new, seq.n_computed + n_new == seq.n_tokens()});
    budget -= n_new;
  }

  // Waiting sequences join: aged ones first in arrival order, then the longest cached prefix first.
  if (budget > 0 && batch_quota_ > 0 && !waiting_.empty()) {
    struct Candidate {
      bool aged;
      int32_t cached;
      int64_t arrival, id;
    };
    std::vector<Candidate> order;
    for (int64_t id : waiting_) {
      const Sequence& seq = seqs_.at(id);
      const int32_t cached = lookup_length(seq);
      if (cached < 0) continue;  // waits for blocks another sequence is computing
      order.push_back({seq.n_skipped >= config_.max_skips, cached, seq.arrival, id});
    }
    std::sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) {
      if (a.aged != b.aged) return a.aged;
      if (!a.aged && a.cached != b.cached) return a.cached > b.cached;
      return a.arrival < b.arrival;
    });
    int64_t latest_admitted = -1;
    for (const Candidate& c : order) {
      if (budget <= 0 || batch_quota_ <= 0 || static_cast<int32_t>(running_.size()) >= config_.max_running) break;
      Sequence& seq = seqs_.at(c.id);
      if (!admit(seq, budget, plan)) break;  // out of blocks: later candidates wait too
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

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* seq = find(c.seq_id);
    if (!seq || seq->status != SequenceStatus::Running) continue;
    seq->n_computed = c.start + c.n_tokens;
    // Pages become ready only when a chunk completes one; the tree is walked only then.
    if (c.start / config_.block_size != seq->n_computed / config_.block_size) publish(*seq);
  }
  for (int32_t b : copy_sources_) pool_.release(b);
  copy_sources_.clear();
}

void Scheduler::append_token(int64_t id, int32_t token) {
  if (Sequence* seq = find(id)) seq->tokens.push_back(token);
}

void Scheduler::finish(int64_t id) {
  Sequence* seq = find(id);
  if (!seq) return;
  // Its computed tail (the part of the last block it filled) stays cached too, as a partial run.
  const int32_t bs = config_.block_size;
  if (cache_ && seq->status == SequenceStatus::Running && seq->n_computed % bs != 0) {
    const size_t n_blocks = static_cast<size_t>(seq->n_computed / bs + 1);
    if (n_blocks <= seq->table.ids().size())
      cache_->insert(std::span<const int32_t>(seq->tokens).first(static_cast<size_t>(seq->n_computed)),
                     std::span<const int32_t>(seq->table.ids()).first(n_blocks), static_cast<int32_t>(n_blocks),
                     seq->cache_salt);
  }
  release_blocks(*seq);
  if (seq->status == SequenceStatus::Running) running_.erase(std::find(running_.begin(), running_.end(), id));
  if (seq->status == SequenceStatus::Waiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  seqs_.erase(id);
}

}  // namespace kestrel
