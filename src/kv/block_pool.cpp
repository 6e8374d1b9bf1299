#include "kv/block_pool.h"

#include <cassert>

namespace kestrel {

BlockPool::BlockPool(int32_t n_blocks) : ref_counts_(static_cast<size_t>(n_blocks), 0) {
  for (int32_t i = 0; i < n_blocks; ++i) free_.insert(i);
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t block = *free_.begin();
  free_.erase(free_.begin());
  ref_counts_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  assert(ref_counts_.at(static_cast<size_t>(block)) > 0);
  ++ref_counts_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  assert(count > 0);
  if (--count == 0) free_.insert(block);
}

bool BlockTable::reserve(BlockPool& pool, int32_t n_tokens, int32_t block_size) {
  const size_t needed = static_cast<size_t>((n_tokens + block_size - 1) / block_size);
  if (needed <= ids_.size()) return true;
  if (static_cast<size_t>(pool.n_free()) < needed - ids_.size()) return false;
  while (ids_.size() < needed) ids_.push_back(*pool.allocate());
  return true;
}

void BlockTable::release_all(BlockPool& pool) {
  for (int32_t b : ids_) pool.release(b);
  ids_.clear();
}

}  // namespace kestrel
