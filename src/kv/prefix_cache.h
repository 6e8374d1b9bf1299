// Prefix cache: a radix tree over token runs whose edges are whole KV blocks. Each node holds one full
// block of block_size tokens, keyed under its parent by those tokens, so the path from a root spells a
// prefix and every block on it holds that prefix's KV. Each cache salt has its own root: tenants with
// different salts never share blocks.
//
// Node states: ready (the block's KV is computed) or pending (the block is reserved for a prompt that
// its owner is still computing). Requests that arrive together with a common prefix see the pending
// blocks and wait for them instead of computing them again.
//
// Contract (all calls from the engine thread):
//   - The cache holds no references. It marks the blocks it registers (BlockPool::mark_cached), so an
//     unreferenced registered block stays cached until the pool evicts it, which removes its node here.
//   - A sequence that shares a prefix holds one reference per shared block (lookup() retains them).
//   - A pending block's owner registers it again with insert() once the block's KV is computed (it turns
//     ready), or calls abandon() before releasing it; abandoned nodes (and anything below them) are dropped.
//   - Descendants are never more recently used than their ancestors (lookups retain whole chains and
//     sequences release deepest block first), so evicting the least recently used block drops a leaf.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/block_pool.h"

namespace kestrel {

struct PrefixMatch {
  std::vector<int32_t> blocks;  // ready full blocks of the prefix, retained for the caller
  // A ready block whose first partial_tokens tokens continue the match (0: none), retained for the caller,
  // who copies those tokens' KV into a block of its own and then releases it.
  int32_t partial_block = -1;
  int32_t partial_tokens = 0;
  bool pending_ahead = false;  // the prefix continues into a block another sequence is computing now
  int32_t n_tokens(int32_t block_size) const {
    return static_cast<int32_t>(blocks.size()) * block_size + partial_tokens;
  }
};

class PrefixCache {
 public:
  // Installs itself as the pool's eviction handler; the pool must outlive the cache.
  PrefixCache(BlockPool& pool, int32_t block_size);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Tokens of `tokens` (at most max_tokens of them) whose KV is cached; retain == false only measures
  // (blocks and partial_block are then not retained, and the caller must not use them). The tree is left
  // as it is either way (retaining changes the pool's counts only).
  PrefixMatch lookup(std::span<const int32_t> tokens, const std::string& salt, int32_t max_tokens, bool retain) const;

  // Registers the sequence's blocks: blocks[i] holds tokens[i * block_size, (i + 1) * block_size). When
  // tokens ends inside the last block, that block is registered with its partial run (a leaf, found only
  // by partial matches): a finished sequence's tail is reused too. Blocks below n_ready are ready, the rest
  // pending (owned by the caller). Blocks whose run is already registered under another block are skipped
  // (the sequence keeps its own copy, unregistered).
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int32_t n_ready,
              const std::string& salt);
  // Drops the registered pending blocks among `blocks` (and their subtrees) before their owner releases them.
  void abandon(std::span<const int32_t> blocks);

  int32_t block_size() const { return block_size_; }
  int32_t n_nodes() const { return static_cast<int32_t>(node_of_block_.size()); }
  bool is_registered(int32_t block) const { return node_of_block_.count(block) != 0; }
  bool is_ready(int32_t block) const;
  // Changes whenever a node is added, turns ready or is dropped: a lookup made at one generation still
  // holds while the generation is unchanged.
  uint64_t generation() const { return generation_; }

 private:
  struct Node;
  Node& root(const std::string& salt);
  void drop(Node* node);  // removes node and its subtree from the tree and unmarks their blocks

  BlockPool& pool_;
  int32_t block_size_;
  std::map<std::string, std::unique_ptr<Node>> roots_;  // per cache salt
  std::map<int32_t, Node*> node_of_block_;
  uint64_t generation_ = 0;
};

}  // namespace kestrel
