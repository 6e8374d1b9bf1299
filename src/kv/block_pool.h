// Fixed-size KV pages: which are free, which hold cached content nobody uses, and how many holders each
// of the others has. Plain integers, no tensors.
//
// Every block is in exactly one state, so n_free() + n_cached() + n_in_use() == n_blocks() always:
//   free    - ref count 0, no content worth keeping;
//   cached  - ref count 0, content registered with the prefix cache (mark_cached); kept until evicted;
//   in use  - ref count >= 1.
// Contract:
//   - Block ids are 0..n_blocks-1. allocate() takes the lowest-numbered free block, so toy tests have exact
//     expectations; when none is free it evicts the least recently released cached block, telling the
//     eviction handler first (the prefix cache drops its entry). Either way the block comes back with ref 1.
//   - Only holders call retain/release. retain() on a cached block takes it back into use (a prefix hit).
//     When the count drops to zero the block becomes cached if it is marked, else free.
//   - mark_cached / unmark_cached are called by the prefix cache only, on blocks it has registered or
//     dropped; unmarking an unreferenced cached block frees it.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <set>
#include <vector>

namespace kestrel {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  // Called with a cached block's id just before allocate() reuses it.
  void set_eviction_handler(std::function<void(int32_t)> handler) { on_evict_ = std::move(handler); }

  std::optional<int32_t> allocate();
  void retain(int32_t block);
  void release(int32_t block);
  void mark_cached(int32_t block);
  void unmark_cached(int32_t block);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_cached() const { return static_cast<int32_t>(lru_.size()); }
  int32_t n_in_use() const { return n_blocks() - n_free() - n_cached(); }
  // Blocks allocate() can hand out now: free plus evictable.
  int32_t n_available() const { return n_free() + n_cached(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }
  bool is_marked(int32_t block) const { return marked_.at(static_cast<size_t>(block)) != 0; }
  // Cached blocks, least recently released first (the eviction order).
  std::vector<int32_t> cached_lru() const { return {lru_.begin(), lru_.end()}; }
  // Free blocks in allocation order.
  std::vector<int32_t> free_list() const { return {free_.begin(), free_.end()}; }

 private:
  std::vector<int32_t> ref_counts_;  // [n_blocks]
  std::vector<uint8_t> marked_;      // [n_blocks] registered with the prefix cache
  std::set<int32_t> free_;
  std::list<int32_t> lru_;           // cached blocks, oldest release first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [n_blocks] valid while the block is cached
  std::function<void(int32_t)> on_evict_;
};

// One sequence's block table: logical block i of the sequence lives in physical block ids()[i].
class BlockTable {
 public:
  // Ensures blocks for positions [0, n_tokens); returns false (allocating nothing) if the pool is short.
  bool reserve(BlockPool& pool, int32_t n_tokens, int32_t block_size);
  // Appends a block the caller already holds a reference for (a prefix-cache hit).
  void append(int32_t block) { ids_.push_back(block); }
  // Replaces logical block i with `block` (copy-on-write); the caller releases the old one.
  void replace(size_t i, int32_t block) { ids_.at(i) = block; }
  // Forgets the last block; the caller releases it.
  void pop_back() { ids_.pop_back(); }
  // Returns every block to the pool, last block first (so a chain's deeper blocks are evicted first).
  void release_all(BlockPool& pool);
  const std::vector<int32_t>& ids() const { return ids_; }
  int32_t capacity_tokens(int32_t block_size) const { return static_cast<int32_t>(ids_.size()) * block_size; }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace kestrel
