// KV page allocation for every sequence: the page pool, each sequence's page table, copy-on-write and the
// prefix cache. The scheduler asks it questions (what does this prompt find cached, can it be admitted, how
// many tokens can a sequence add) and tells it what happened (admit, allocate, publish, truncate, fork,
// free); reference counts and the radix tree stay in here.
//
// Page states (BlockPool): free, cached (registered with the prefix cache, unreferenced, evictable) or in
// use. A sequence's pages hold its positions [0, n_computed) and the room being filled; pages it shares
// (prefix hits, forks) are copied before it writes into them (copy-on-write), so a shared or cached
// page's KV never changes.
//
// Contract: one thread makes every call. Copies returned by admit/allocate must run (KV of src into dst,
// in order) before the forward that writes the new positions; after it, commit_copies() lets the copy
// sources go. Every sequence id is used once (free() forgets it).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace kestrel {

struct BlockCopy {
  int32_t src = 0, dst = 0;  // copy every position of page src into page dst
  bool operator==(const BlockCopy&) const = default;
};

// What a prompt finds in the prefix cache, measured once (nothing retained): current while the cache's
// tree is unchanged since (is_current).
struct PromptMatch {
  PrefixMatch prefix;
  uint64_t generation = 0;
  int32_t n_tokens = 0;  // prompt tokens whose KV is cached
  bool pending_ahead() const { return prefix.pending_ahead; }
};

class KvManager {
 public:
  KvManager(int32_t n_blocks, int32_t block_size, bool prefix_caching);

  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return cache_ != nullptr; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache* cache() const { return cache_.get(); }

  // The cached prefix of tokens[0, max_tokens) under salt (nothing when prefix caching is off).
  PromptMatch match(std::span<const int32_t> tokens, const std::string& salt, int32_t max_tokens) const;
  // Whether a new sequence starting from `match` gets pages for positions [0, n_total) now.
  bool can_admit(const PromptMatch& match, int32_t n_total) const;
  // False once the tree changed after the match (a sequence admitted since registered pages, or a page was
  // evicted): match again before admitting.
  bool is_current(const PromptMatch& match) const;
  // Starts sequence seq (a new id) from a current match's pages (retained; a partially matched page is
  // copied into a page of its own) with pages for positions [0, n_total), which can_admit must have
  // allowed. Returns the tokens whose KV is already there.
  int32_t admit(int64_t seq, const std::string& salt, const PromptMatch& match, int32_t n_total,
                std::vector<BlockCopy>& copies);

  // Positions seq can add after n_computed with the pages it holds and those available now.
  int32_t room(int64_t seq, int32_t n_computed) const;
  bool can_allocate(int64_t seq, int32_t n_computed, int32_t n_total) const { return room(seq, n_computed) >= n_total - n_computed; }
  // Pages for positions [0, n_total) (a sequence seen for the first time starts with none); the page
  // receiving position n_computed is copied first when shared. False (nothing changed) when the pool is short.
  bool allocate(int64_t seq, int32_t n_computed, int32_t n_total, std::vector<BlockCopy>& copies);

  // Registers seq's pages whose tokens are known with the prefix cache: those below n_computed as ready,
  // later ones (a prompt still being computed) as pending, so requests with the same prefix wait for them.
  void publish(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed);
  // Keeps positions [0, n_tokens) only (speculative rollback): pages past them go back, never published;
  // a pending registration of the page holding position n_tokens is dropped, since it will be rewritten.
  void truncate(int64_t seq, int32_t n_tokens);
  // A new sequence sharing every page of parent (n > 1 choices).
  void fork(int64_t parent, int64_t child);
  // Releases seq's pages, last first. With n_computed > 0 its computed tail (the part of its last page it
  // filled) stays cached first, as a partial run of tokens.
  void free(int64_t seq, std::span<const int32_t> tokens, int32_t n_computed);
  // The copies of the last admit/allocate calls have run: their sources go back.
  void commit_copies();

  // seq's page table: page i holds positions [i * block_size, (i + 1) * block_size). Empty for unknown ids.
  const std::vector<int32_t>& pages(int64_t seq) const;
  bool has(int64_t seq) const { return seqs_.count(seq) != 0; }

 private:
  struct SeqPages {
    BlockTable table;
    std::string salt;
  };
  // The page receiving position n_computed is shared with another holder or registered with the prefix
  // cache as computed: it is copied before anything is written into it.
  bool must_copy(const SeqPages& s, int32_t n_computed) const;

  int32_t block_size_;
  BlockPool pool_;
  std::unique_ptr<PrefixCache> cache_;
  std::map<int64_t, SeqPages> seqs_;
  std::vector<int32_t> copy_sources_;  // partially matched pages retained until their copies ran
};

}  // namespace kestrel
