// Block pool states and the radix prefix cache, on toy pools with exact block ids, ref counts and
// free/LRU order.
#include <numeric>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::iota_tokens;

void expect_accounting(const BlockPool& pool) {
  EXPECT_EQ(pool.n_free() + pool.n_cached() + pool.n_in_use(), pool.n_blocks());
  int32_t referenced = 0;
  for (int32_t b = 0; b < pool.n_blocks(); ++b) referenced += pool.ref_count(b) > 0;
  EXPECT_EQ(referenced, pool.n_in_use());
}

TEST(BlockPool, CachedBlocksWaitInLruOrderAndAreEvictedOldestFirst) {
  BlockPool pool(4);
  std::vector<int32_t> evicted;
  pool.set_eviction_handler([&](int32_t b) { evicted.push_back(b); });
  for (int i = 0; i < 4; ++i) EXPECT_EQ(*pool.allocate(), i);
  pool.mark_cached(1);
  pool.mark_cached(2);
  pool.release(2);
  pool.release(1);
  pool.release(3);  // unmarked: free
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{3}));
  EXPECT_EQ(pool.n_in_use(), 1);
  expect_accounting(pool);
  pool.retain(2);  // a prefix hit takes it back
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{1}));
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(*pool.allocate(), 3);  // free blocks before evicting
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(*pool.allocate(), 1);  // then the oldest cached block
  EXPECT_EQ(evicted, (std::vector<int32_t>{1}));
  EXPECT_FALSE(pool.is_marked(1));
  EXPECT_FALSE(pool.allocate().has_value());
  expect_accounting(pool);
  pool.unmark_cached(2);
  pool.release(2);
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{2}));
}

// Two requests sharing 48 tokens over 11 pages of 16 tokens (DESIGN.md's toy case).
TEST(PrefixCache, SharedPrefixIsStoredOnce) {
  BlockPool pool(11);
  PrefixCache cache(pool, 16);
  const std::vector<int32_t> a = iota_tokens(60);
  std::vector<int32_t> b(a.begin(), a.begin() + 48);
  for (int i = 0; i < 12; ++i) b.push_back(900 + i);

  BlockTable ta;
  ASSERT_TRUE(ta.reserve(pool, 60, 16));  // blocks 0..3
  cache.insert(a, std::span<const int32_t>(ta.ids()).first(3), /*n_ready=*/0, "");
  EXPECT_EQ(cache.n_nodes(), 3);
  // While a's prompt is being computed, b sees pending blocks and must wait.
  PrefixMatch m = cache.lookup(b, "", 59, false);
  EXPECT_TRUE(m.pending_ahead);
  EXPECT_TRUE(m.blocks.empty());
  cache.insert(a, std::span<const int32_t>(ta.ids()).first(3), 3, "");  // computed
  m = cache.lookup(b, "", 59, true);
  EXPECT_FALSE(m.pending_ahead);
  EXPECT_EQ(m.blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.partial_block, -1);
  EXPECT_EQ(m.n_tokens(16), 48);
  for (int32_t blk : {0, 1, 2}) EXPECT_EQ(pool.ref_count(blk), 2);
  BlockTable tb;
  for (int32_t blk : m.blocks) tb.append(blk);
  ASSERT_TRUE(tb.reserve(pool, 60, 16));
  EXPECT_EQ(tb.ids(), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(pool.n_in_use(), 5);  // 48 shared tokens stored once
  expect_accounting(pool);

  // A different salt sees nothing.
  EXPECT_EQ(cache.lookup(b, "tenant-2", 59, false).n_tokens(16), 0);

  // A request sharing 40 tokens reuses two blocks and copies 8 tokens of the third.
  std::vector<int32_t> c(a.begin(), a.begin() + 40);
  c.push_back(7);
  c.push_back(8);
  m = cache.lookup(c, "", 41, false);
  EXPECT_EQ(m.blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.partial_block, 2);
  EXPECT_EQ(m.partial_tokens, 8);
  EXPECT_EQ(pool.ref_count(2), 2);  // not retained by a measuring lookup

  // Both finish: shared blocks stay cached, unregistered ones are free; deepest released first.
  tb.release_all(pool);
  ta.release_all(pool);
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10}));
  expect_accounting(pool);

  // Filling the pool evicts the cached chain deepest first; its nodes leave the tree.
  BlockTable big;
  ASSERT_TRUE(big.reserve(pool, 16 * 9, 16));
  EXPECT_EQ(big.ids(), (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10, 2}));
  EXPECT_EQ(cache.n_nodes(), 2);
  EXPECT_EQ(cache.lookup(a, "", 59, false).n_tokens(16), 32);
  ASSERT_TRUE(big.reserve(pool, 16 * 11, 16));
  EXPECT_EQ(cache.n_nodes(), 0);
  EXPECT_EQ(pool.n_in_use(), 11);
  expect_accounting(pool);
  big.release_all(pool);
  EXPECT_EQ(pool.n_free(), 11);
}

TEST(PrefixCache, AbandonedPendingBlocksAreDroppedWithTheirSubtree) {
  BlockPool pool(8);
  PrefixCache cache(pool, 4);
  const std::vector<int32_t> a = iota_tokens(12);
  BlockTable ta;
  ASSERT_TRUE(ta.reserve(pool, 12, 4));
  cache.insert(a, ta.ids(), /*n_ready=*/1, "");  // block 0 computed; 1 and 2 pending
  EXPECT_TRUE(cache.is_ready(0));
  EXPECT_FALSE(cache.is_ready(1));
  cache.abandon(ta.ids());  // its owner is preempted before computing them
  EXPECT_EQ(cache.n_nodes(), 1);
  ta.release_all(pool);
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{0}));
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  // The whole prompt cached: at most max_tokens are matched, the rest comes from the partial block.
  PrefixMatch m = cache.lookup(std::vector<int32_t>(a.begin(), a.begin() + 4), "", 3, false);
  EXPECT_TRUE(m.blocks.empty());
  EXPECT_EQ(m.partial_block, 0);
  EXPECT_EQ(m.partial_tokens, 3);
  expect_accounting(pool);
}

TEST(PrefixCache, DuplicateRunsKeepTheFirstBlock) {
  BlockPool pool(6);
  PrefixCache cache(pool, 4);
  const std::vector<int32_t> a = iota_tokens(8);
  BlockTable t1, t2;
  ASSERT_TRUE(t1.reserve(pool, 8, 4));
  ASSERT_TRUE(t2.reserve(pool, 8, 4));
  cache.insert(a, t1.ids(), 2, "");
  cache.insert(a, t2.ids(), 2, "");  // same content computed twice: the second copy stays private
  EXPECT_EQ(cache.n_nodes(), 2);
  EXPECT_TRUE(cache.is_registered(0));
  EXPECT_FALSE(cache.is_registered(2));
  t2.release_all(pool);
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{2, 3, 4, 5}));
  t1.release_all(pool);
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{1, 0}));
  expect_accounting(pool);
}

}  // namespace
}  // namespace kestrel
