#include "kv/kv_manager.h"

#include <algorithm>
#include <cassert>

namespace kestrel {
namespace {
int32_t pages_for(int32_t n_tokens, int32_t block_size) { return (n_tokens + block_size - 1) / block_size; }
const std::vector<int32_t> kNoPages;
}  // namespace

KvManager::KvManager(int32_t n_blocks, int32_t block_size, bool prefix_caching)
    : block_size_(block_size),
      pool_(n_blocks),
      cache_(prefix_caching ? std::make_unique<PrefixCache>(pool_, block_size) : nullptr) {}

PromptMatch KvManager::match(std::span<const int32_t> tokens, const std::string& salt, int32_t max_tokens) const {
  PromptMatch m;
  if (!cache_) return m;
  m.prefix = cache_->lookup(tokens, salt, max_tokens, false);
  m.generation = cache_->generation();
  m.n_tokens = m.prefix.n_tokens(block_size_);
  return m;
}

bool KvManager::is_current(const PromptMatch& match) const { return !cache_ || match.generation == cache_->generation(); }

bool KvManager::can_admit(const PromptMatch& match, int32_t n_total) const {
  // Pages left once the matched ones are taken (cached, unreferenced ones leave the evictable set).
  int32_t available = pool_.n_available();
  for (int32_t b : match.prefix.blocks) available -= pool_.ref_count(b) == 0 ? 1 : 0;
  if (match.prefix.partial_block >= 0 && pool_.ref_count(match.prefix.partial_block) == 0) --available;
  // The partial page's copy, or a fresh page, and every one after it.
  const int32_t need = pages_for(n_total, block_size_) - static_cast<int32_t>(match.prefix.blocks.size());
  return need <= available;
}

int32_t KvManager::admit(int64_t seq, const std::string& salt, const PromptMatch& match, int32_t n_total,
                         std::vector<BlockCopy>& copies) {
  assert(!seqs_.count(seq) && is_current(match) && can_admit(match, n_total));
  SeqPages& s = seqs_[seq];
  s.salt = salt;
  for (int32_t b : match.prefix.blocks) {
    pool_.retain(b);
    s.table.append(b);
  }
  int32_t n_computed = static_cast<int32_t>(match.prefix.blocks.size()) * block_size_;
  if (match.prefix.partial_block >= 0) {
    pool_.retain(match.prefix.partial_block);  // kept until its copy ran (commit_copies)
    const int32_t own = *pool_.allocate();
    copies.push_back({match.prefix.partial_block, own});
    copy_sources_.push_back(match.prefix.partial_block);
    s.table.append(own);
    n_computed += match.prefix.partial_tokens;
  }
  const bool ok = allocate(seq, n_computed, n_total, copies);
  assert(ok);
  (void)ok;
  return n_computed;
}

bool KvManager::must_copy(const SeqPages& s, int32_t n_computed) const {
  const size_t i = static_cast<size_t>(n_computed / block_size_);
  if (i >= s.table.ids().size()) return false;
  const int32_t page = s.table.ids()[i];
  return pool_.ref_count(page) > 1 || (cache_ && cache_->is_ready(page));
}

int32_t KvManager::room(int64_t seq, int32_t n_computed) const {
  const auto it = seqs_.find(seq);
  const int32_t held = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.table.ids().size());
  const bool copy = it != seqs_.end() && must_copy(it->second, n_computed);
  return std::max(0, (held + pool_.n_available() - (copy ? 1 : 0)) * block_size_ - n_computed);
}

bool KvManager::allocate(int64_t seq, int32_t n_computed, int32_t n_total, std::vector<BlockCopy>& copies) {
  if (room(seq, n_computed) < n_total - n_computed) return false;
  SeqPages& s = seqs_[seq];
  if (must_copy(s, n_computed)) {
    const size_t i = static_cast<size_t>(n_computed / block_size_);
    const int32_t shared = s.table.ids()[i];
    const int32_t own = *pool_.allocate();
    copies.push_back({shared, own});
    s.table.replace(i, own);
    pool_.release(shared);
  }
  const bool ok = s.table.reserve(pool_, n_total, block_size_);
  assert(ok);
  return ok;
}

void KvManager::publish(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed) {
  const auto it = seqs_.find(seq);
  if (!cache_ || it == seqs_.end()) return;
  const std::vector<int32_t>& ids = it->second.table.ids();
  const size_t n_full = std::min(ids.size(), tokens.size() / static_cast<size_t>(block_size_));
  cache_->insert(tokens, std::span<const int32_t>(ids).first(n_full), n_computed / block_size_, it->second.salt);
}

void KvManager::truncate(int64_t seq, int32_t n_tokens) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  BlockTable& table = it->second.table;
  const size_t keep = static_cast<size_t>(pages_for(n_tokens, block_size_));
  if (keep >= table.ids().size() && n_tokens % block_size_ == 0) return;
  if (cache_) {
    // Pending registrations past the cut (and of the page it cuts, rewritten from here) are dropped.
    const size_t first_rewritten = static_cast<size_t>(n_tokens / block_size_);
    if (first_rewritten < table.ids().size())
      cache_->abandon(std::span<const int32_t>(table.ids()).subspan(first_rewritten));
  }
  while (table.ids().size() > keep) {
    pool_.release(table.ids().back());
    table.pop_back();
  }
}

void KvManager::fork(int64_t parent, int64_t child) {
  const SeqPages& p = seqs_.at(parent);
  assert(!seqs_.count(child));
  SeqPages c;
  c.salt = p.salt;
  for (int32_t b : p.table.ids()) {
    pool_.retain(b);
    c.table.append(b);
  }
  seqs_.emplace(child, std::move(c));
}

void KvManager::free(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqPages& s = it->second;
  if (cache_) {
    // Its computed tail (the part of the last page it filled) stays cached too, as a partial run.
    const size_t n_pages = static_cast<size_t>(n_computed / block_size_ + 1);
    if (n_computed % block_size_ != 0 && n_pages <= s.table.ids().size())
      cache_->insert(tokens.first(static_cast<size_t>(n_computed)), std::span<const int32_t>(s.table.ids()).first(n_pages),
                     static_cast<int32_t>(n_pages), s.salt);
    cache_->abandon(s.table.ids());
  }
  s.table.release_all(pool_);
  seqs_.erase(it);
}

void KvManager::commit_copies() {
  for (int32_t b : copy_sources_) pool_.release(b);
  copy_sources_.clear();
}

const std::vector<int32_t>& KvManager::pages(int64_t seq) const {
  const auto it = seqs_.find(seq);
  return it == seqs_.end() ? kNoPages : it->second.table.ids();
}

}  // namespace kestrel
