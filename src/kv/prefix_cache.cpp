#include "kv/prefix_cache.h"

#include <algorithm>
#include <cassert>

namespace kestrel {

struct PrefixCache::Node {
  int32_t block = -1;           // -1 at a root
  std::vector<int32_t> tokens;  // [block_size] the run this node adds to its parent's prefix
  bool ready = false;
  Node* parent = nullptr;
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;  // keyed by their runs
};

PrefixCache::PrefixCache(BlockPool& pool, int32_t block_size) : pool_(pool), block_size_(block_size) {
  pool_.set_eviction_handler([this](int32_t block) {
    const auto it = node_of_block_.find(block);
    if (it != node_of_block_.end()) drop(it->second);
  });
}

PrefixCache::~PrefixCache() { pool_.set_eviction_handler(nullptr); }

PrefixCache::Node& PrefixCache::root(const std::string& salt) {
  std::unique_ptr<Node>& r = roots_[salt];
  if (!r) r = std::make_unique<Node>();
  return *r;
}

bool PrefixCache::is_ready(int32_t block) const {
  const auto it = node_of_block_.find(block);
  return it != node_of_block_.end() && it->second->ready;
}

PrefixMatch PrefixCache::lookup(std::span<const int32_t> tokens, const std::string& salt, int32_t max_tokens,
                                bool retain) const {
  PrefixMatch match;
  const auto found = roots_.find(salt);
  if (found == roots_.end()) return match;
  const size_t limit = std::min(tokens.size(), static_cast<size_t>(std::max(0, max_tokens)));
  const size_t bs = static_cast<size_t>(block_size_);
  const Node* node = found->second.get();
  size_t pos = 0;
  // Whole blocks.
  while (pos + bs <= limit) {
    const std::vector<int32_t> run(tokens.begin() + pos, tokens.begin() + pos + bs);
    const auto child = node->children.find(run);
    if (child == node->children.end()) break;
    if (!child->second->ready) {
      match.pending_ahead = true;
      break;
    }
    node = child->second.get();
    match.blocks.push_back(node->block);
    pos += bs;
  }
  // Part of one more block: the ready child sharing the longest run with what is left.
  if (!match.pending_ahead && pos < limit) {
    const size_t want = std::min(bs, limit - pos);
    for (const auto& [run, child] : node->children) {
      size_t common = 0;
      while (common < want && common < run.size() && run[common] == tokens[pos + common]) ++common;
      if (common == 0) continue;
      if (!child->ready) {
        // Another sequence is computing a block that shares this run: wait for it when it covers all of it.
        if (common == want) match.pending_ahead = true;
        continue;
      }
      if (static_cast<int32_t>(common) > match.partial_tokens) {
        match.partial_tokens = static_cast<int32_t>(common);
        match.partial_block = child->block;
      }
    }
    if (match.pending_ahead) match.partial_block = -1, match.partial_tokens = 0;
  }
  if (retain) {
    for (int32_t b : match.blocks) pool_.retain(b);
    if (match.partial_block >= 0) pool_.retain(match.partial_block);
  }
  return match;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int32_t n_ready,
                         const std::string& salt) {
  const size_t bs = static_cast<size_t>(block_size_);
  Node* node = &root(salt);
  for (size_t i = 0; i < blocks.size() && i * bs < tokens.size(); ++i) {
    const size_t end = std::min(tokens.size(), (i + 1) * bs);  // a partial run only as the last block
    std::vector<int32_t> run(tokens.begin() + i * bs, tokens.begin() + end);
    const bool ready = static_cast<int32_t>(i) < n_ready;
    auto child = node->children.find(run);
    if (child == node->children.end()) {
      if (node_of_block_.count(blocks[i])) break;  // the block already sits elsewhere in the tree
      auto fresh = std::make_unique<Node>();
      fresh->block = blocks[i];
      fresh->tokens = run;
      fresh->ready = ready;
      fresh->parent = node;
      node_of_block_[blocks[i]] = fresh.get();
      pool_.mark_cached(blocks[i]);
      child = node->children.emplace(std::move(run), std::move(fresh)).first;
      ++generation_;
    } else if (child->second->block == blocks[i] && ready && !child->second->ready) {
      child->second->ready = true;
      ++generation_;
    }
    node = child->second.get();
  }
}

void PrefixCache::abandon(std::span<const int32_t> blocks) {
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    const auto it = node_of_block_.find(*b);
    if (it != node_of_block_.end() && !it->second->ready) drop(it->second);
  }
}

void PrefixCache::drop(Node* node) {
  assert(node->parent);
  while (!node->children.empty()) drop(node->children.begin()->second.get());
  node_of_block_.erase(node->block);
  pool_.unmark_cached(node->block);
  ++generation_;
  Node* parent = node->parent;
  parent->children.erase(node->tokens);  // destroys node
}

}  // namespace kestrel
