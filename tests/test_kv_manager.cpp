// The KV manager on toy pools with exact page ids: admission from a prefix match (one walk, a stale match
// detected), room and copy-on-write, truncation (speculative rollback), forks and freeing.
#include <numeric>

#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::iota_tokens;

TEST(KvManager, AllocatesPagesAndCountsRoom) {
  KvManager kv(6, 4, false);
  std::vector<BlockCopy> copies;
  EXPECT_EQ(kv.room(1, 0), 24);
  ASSERT_TRUE(kv.allocate(1, 0, 10, copies));
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(kv.room(1, 10), 14);  // 2 left in page 2, three free pages
  EXPECT_TRUE(kv.can_allocate(1, 10, 24));
  EXPECT_FALSE(kv.can_allocate(1, 10, 25));
  EXPECT_FALSE(kv.allocate(2, 0, 13, copies));  // 4 pages wanted, 3 free: nothing taken
  EXPECT_TRUE(kv.pages(2).empty());
  EXPECT_EQ(kv.pool().n_free(), 3);
  EXPECT_TRUE(copies.empty());
  kv.free(1, {}, 0);
  EXPECT_EQ(kv.pool().n_free(), 6);
  EXPECT_FALSE(kv.has(1));
}

TEST(KvManager, AdmitsFromOneMatchAndRetakesAStaleOne) {
  KvManager kv(16, 4, true);
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> a = iota_tokens(10);
  const PromptMatch none = kv.match(a, "", 9);
  EXPECT_EQ(none.n_tokens, 0);
  ASSERT_TRUE(kv.can_admit(none, 10));
  EXPECT_EQ(kv.admit(1, "", none, 10, copies), 0);
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1, 2}));
  kv.publish(1, a, 10);  // pages 0 and 1 are full and computed
  kv.commit_copies();

  // b shares a's first 6 tokens: one whole page and half of the next, which it copies.
  std::vector<int32_t> b(a.begin(), a.begin() + 6);
  for (int i = 0; i < 6; ++i) b.push_back(900 + i);
  const PromptMatch m = kv.match(b, "", 11);
  EXPECT_EQ(m.n_tokens, 6);
  EXPECT_TRUE(kv.is_current(m));
  ASSERT_TRUE(kv.can_admit(m, 12));
  EXPECT_EQ(kv.admit(2, "", m, 12, copies), 6);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(copies[0].dst, 3);
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(kv.pool().ref_count(0), 2);
  EXPECT_EQ(kv.pool().ref_count(1), 2);  // the copy's source is held until the copy ran
  kv.commit_copies();
  EXPECT_EQ(kv.pool().ref_count(1), 1);

  // A match goes stale when the tree changes.
  const PromptMatch before = kv.match(b, "", 11);
  kv.publish(2, b, 12);
  EXPECT_FALSE(kv.is_current(before));
  EXPECT_EQ(kv.match(b, "", 11).n_tokens, 11);  // b's own pages are cached now

  kv.free(1, a, 10);
  kv.free(2, b, 12);
  EXPECT_EQ(kv.pool().n_in_use(), 0);
}

TEST(KvManager, WaitsForPagesAnotherSequenceIsComputing) {
  KvManager kv(16, 4, true);
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> a = iota_tokens(12);
  ASSERT_EQ(kv.admit(1, "", kv.match(a, "", 11), 12, copies), 0);
  kv.publish(1, a, 0);  // registered, nothing computed yet
  EXPECT_TRUE(kv.match(a, "", 11).pending_ahead());
  kv.publish(1, a, 12);
  const PromptMatch m = kv.match(a, "", 11);
  EXPECT_FALSE(m.pending_ahead());
  EXPECT_EQ(m.n_tokens, 11);
  kv.free(1, a, 12);
}

TEST(KvManager, CopiesASharedPageBeforeWritingIt) {
  KvManager kv(8, 4, false);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate(1, 0, 6, copies));
  kv.fork(1, 2);
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kv.room(2, 6), 22);  // (2 held + 6 free - 1 for the copy of page 1) x 4 - 6
  ASSERT_TRUE(kv.allocate(2, 6, 7, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(copies[0].dst, 2);
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(kv.pool().ref_count(0), 2);
  EXPECT_EQ(kv.pool().ref_count(1), 1);
  copies.clear();
  ASSERT_TRUE(kv.allocate(1, 6, 7, copies));  // page 1 is its own now
  EXPECT_TRUE(copies.empty());
  kv.free(1, {}, 0);
  kv.free(2, {}, 0);
  EXPECT_EQ(kv.pool().n_free(), 8);
}

TEST(KvManager, TruncateGivesBackPagesAndNeverPublishesThem) {
  KvManager kv(16, 4, true);
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> a = iota_tokens(16);
  ASSERT_EQ(kv.admit(1, "", kv.match(a, "", 15), 16, copies), 0);
  kv.publish(1, a, 6);  // pages 0 computed; 1..3 pending (a verify step in flight)
  EXPECT_EQ(kv.cache()->n_nodes(), 4);
  kv.truncate(1, 6);  // rejected: positions 6..15
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kv.cache()->n_nodes(), 1);  // page 1 is rewritten from position 6: its pending entry went too
  EXPECT_EQ(kv.pool().n_free(), 14);
  EXPECT_TRUE(kv.allocate(1, 6, 8, copies));
  EXPECT_TRUE(copies.empty());

  // Truncating into a page the cache holds as computed: the next write copies it, the cached KV stays.
  kv.publish(1, a, 8);  // page 1 computed
  kv.truncate(1, 5);
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(kv.allocate(1, 5, 8, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 1);
  EXPECT_EQ(kv.pages(1)[1], copies[0].dst);
  EXPECT_TRUE(kv.cache()->is_ready(1));
  EXPECT_EQ(kv.pool().ref_count(1), 0);  // cached, evictable
  kv.free(1, a, 8);
  EXPECT_EQ(kv.pool().n_in_use(), 0);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// A page's bytes leave one KvStorage and land in another (prefill/decode disaggregation): exported and
// imported they are the same page, for float, quantized and latent (V inside K) caches; the other pages
// stay as they were.
TEST(KvStorage, PagesExportAndImportWhole) {
  for (const bool latent : {false, true}) {
    for (const KvTypes types : {KvTypes(KvType::F16), KvTypes(KvType::Q8_0)}) {
      SCOPED_TRACE(std::string(latent ? "latent " : "") + types.name());
      KvCacheSpec spec;
      spec.n_layers = 2;
      spec.n_kv_heads = latent ? 1 : 2;
      spec.k_dim = 64;
      spec.v_dim = latent ? 32 : 64;
      spec.v_in_k = latent;
      spec.types = types;
      spec.block_size = 4;
      spec.n_blocks = 3;
      KvStorage a(spec), b(spec);
      EXPECT_EQ(a.page_bytes(), spec.bytes_per_token() * 4);
      std::vector<uint8_t> page(a.page_bytes()), zeros(a.page_bytes(), 0), back(a.page_bytes());  // [page_bytes]
      for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<uint8_t>(i * 7 + 3);
      for (int32_t p = 0; p < 3; ++p) b.import_page(p, zeros.data());
      a.import_page(1, page.data());
      a.export_page(1, back.data());
      EXPECT_EQ(back, page);
      b.import_page(2, back.data());  // across storages
      b.export_page(2, back.data());
      EXPECT_EQ(back, page);
      for (int32_t p : {0, 1}) {
        b.export_page(p, back.data());
        EXPECT_EQ(back, zeros) << p;
      }
      b.copy_block(2, 0);  // the same bytes as the storage's own page copy
      b.export_page(0, back.data());
      EXPECT_EQ(back, page);
    }
  }
}

}  // namespace
}  // namespace kestrel
