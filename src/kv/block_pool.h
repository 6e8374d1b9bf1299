// Fixed-size KV pages: which are free and how many holders each has. Plain integers, no tensors.
//
// Contract: block ids are 0..n_blocks-1. allocate() hands out a free block with ref count 1, taking the
// lowest-numbered free block first so toy tests have exact expectations. Only holders call retain/release;
// a block returns to the free list when its count drops to zero. free + in_use == n_blocks always.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace kestrel {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  std::optional<int32_t> allocate();
  void retain(int32_t block);
  void release(int32_t block);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_in_use() const { return n_blocks() - n_free(); }
  int32_t ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }

 private:
  std::vector<int32_t> ref_counts_;  // [n_blocks]
  std::set<int32_t> free_;
};

// One sequence's block table: logical block i of the sequence lives in physical block ids()[i].
class BlockTable {
 public:
  // Ensures blocks for positions [0, n_tokens); returns false (allocating nothing) if the pool is short.
  bool reserve(BlockPool& pool, int32_t n_tokens, int32_t block_size);
  // Returns every block to the pool.
  void release_all(BlockPool& pool);
  const std::vector<int32_t>& ids() const { return ids_; }
  int32_t capacity_tokens(int32_t block_size) const { return static_cast<int32_t>(ids_.size()) * block_size; }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace kestrel
