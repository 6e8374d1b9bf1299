#include "kv/block_pool.h"

#include <cassert>

namespace kestrel {

BlockPool::BlockPool(int32_t n_blocks)
    : ref_counts_(static_cast<size_t>(n_blocks), 0),
      marked_(static_cast<size_t>(n_blocks), 0),
      lru_pos_(static_cast<size_t>(n_blocks)) {
  for (int32_t i = 0; i < n_blocks; ++i) free_.insert(i);
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = *free_.begin();
    free_.erase(free_.begin());
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    marked_[static_cast<size_t>(block)] = 0;  // before the handler, whose unmark_cached then skips it
    if (on_evict_) on_evict_(block);
  } else {
    return std::nullopt;
  }
  ref_counts_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  if (count == 0) {
    assert(marked_[static_cast<size_t>(block)]);  // only cached blocks come back from zero
    lru_.erase(lru_pos_[static_cast<size_t>(block)]);
  }
  ++count;
}

void BlockPool::release(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  assert(count > 0);
  if (--count > 0) return;
  if (marked_[static_cast<size_t>(block)]) {
    lru_pos_[static_cast<size_t>(block)] = lru_.insert(lru_.end(), block);
  } else {
    free_.insert(block);
  }
}

void BlockPool::mark_cached(int32_t block) {
  assert(ref_counts_.at(static_cast<size_t>(block)) > 0);
  marked_[static_cast<size_t>(block)] = 1;
}

void BlockPool::unmark_cached(int32_t block) {
  if (!marked_.at(static_cast<size_t>(block))) return;
  marked_[static_cast<size_t>(block)] = 0;
  if (ref_counts_[static_cast<size_t>(block)] == 0) {
    lru_.erase(lru_pos_[static_cast<size_t>(block)]);
    free_.insert(block);
  }
}

bool BlockTable::reserve(BlockPool& pool, int32_t n_tokens, int32_t block_size) {
  const size_t needed = static_cast<size_t>((n_tokens + block_size - 1) / block_size);
  if (needed <= ids_.size()) return true;
  if (static_cast<size_t>(pool.n_available()) < needed - ids_.size()) return false;
  while (ids_.size() < needed) ids_.push_back(*pool.allocate());
  return true;
}

void BlockTable::release_all(BlockPool& pool) {
  for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) pool.release(*it);
  ids_.clear();
}

}  // namespace kestrel
