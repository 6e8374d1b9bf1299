// The scheduler on toy pools, without a model: chunked prefill, decodes first, waiting for a prefix being
// computed, preemption and resume, aging, copy-on-write forks, and the static/dynamic batch policies.
#include <cstring>
#include <numeric>

#include "engine/forward_batch.h"
#include "engine/prefill_messages.h"
#include "engine/scheduler.h"
#include "test_support.h"

namespace kestrel {
namespace {

Sequence make_seq(int64_t id, int32_t n_prompt, int32_t first_token = 100, double arrival_ms = 0) {
  Sequence s;
  s.id = id;
  s.tokens.resize(static_cast<size_t>(n_prompt));
  std::iota(s.tokens.begin(), s.tokens.end(), first_token);
  s.arrival_ms = arrival_ms;
  return s;
}

// Runs a plan as the engine would (commit, then a token for each sampling chunk).
void run(Scheduler& s, const StepPlan& plan, int32_t token = 7) {
  s.commit(plan);
  for (const ScheduledChunk& c : plan.chunks)
    if (c.samples()) s.append_token(c.seq_id, token);
}

std::vector<std::pair<int64_t, int32_t>> chunks(const StepPlan& plan) {
  std::vector<std::pair<int64_t, int32_t>> out;
  for (const ScheduledChunk& c : plan.chunks) out.emplace_back(c.seq_id, c.n_tokens());
  return out;
}

using Chunks = std::vector<std::pair<int64_t, int32_t>>;

// Speculative decoding: drafts ride with the pending token when budget and free pages allow (cut to fit,
// never preempting), only verified ones join the sequence, and the rejected ones' pages go back at once.
TEST(Scheduler, DraftsRunWithThePendingTokenAndRollBack) {
  KvManager kv(4, 4, true);  // 16 positions
  const BlockPool& pool = kv.pool();
  SchedulerConfig config;
  config.block_size = 4;
  config.max_batch_tokens = 8;
  Scheduler s(kv, config);
  s.add(make_seq(1, 3));
  StepPlan p = s.schedule(0);
  run(s, p);  // tokens 100 101 102 7, the first three computed
  EXPECT_EQ(pool.n_in_use(), 1);
  s.set_drafts(1, {20, 21, 22, 23, 24, 25, 26, 27, 28});
  p = s.schedule(0);
  // The budget leaves 7 of 9 drafts: positions 3..10 on three pages.
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start, 3);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{7, 20, 21, 22, 23, 24, 25, 26}));
  EXPECT_EQ(p.chunks[0].n_logits, 8);
  EXPECT_EQ(p.chunks[0].pages.size(), 3u);
  EXPECT_EQ(pool.n_in_use(), 3);
  s.commit(p);
  EXPECT_EQ(s.find(1)->n_computed, 4);  // drafts join only once verified
  s.accept_drafts(1, 2);
  s.append_token(1, 9);
  EXPECT_EQ(s.find(1)->tokens, (std::vector<int32_t>{100, 101, 102, 7, 20, 21, 9}));
  EXPECT_EQ(s.find(1)->n_computed, 6);
  EXPECT_EQ(kv.pages(1).size(), 2u);  // positions 0..5: the third page went back
  EXPECT_EQ(pool.n_in_use(), 2);
  // Drafts only take pages nobody else needs: with the pool full they are dropped, not preempting anyone.
  s.add(make_seq(2, 7, 300));
  p = s.schedule(0);
  run(s, p);  // 1 computes 9 (position 6) beside 2's prompt
  EXPECT_EQ(pool.n_in_use(), 4);
  s.set_drafts(1, {30, 31, 32, 33});
  p = s.schedule(0);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{7}));  // position 7 ends its page; 8 would need a new one
  EXPECT_EQ(p.chunks[0].n_logits, 1);
  EXPECT_TRUE(s.find(1)->drafts.empty());
  EXPECT_EQ(s.n_preemptions(), 0);
  run(s, p);
  EXPECT_EQ(s.find(1)->n_computed, 8);
}

TEST(Scheduler, ChunkedPrefillRunsBesideDecodes) {
  KvManager kv(32, 16, false);
  const BlockPool& pool = kv.pool();
  SchedulerConfig config;
  config.max_batch_tokens = 32;
  Scheduler s(kv, config);
  s.add(make_seq(1, 10));
  StepPlan p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 10}}));
  EXPECT_TRUE(p.chunks[0].samples());
  run(s, p);
  s.add(make_seq(2, 70));
  // The decode goes first; the long prompt takes the rest of the budget, chunk by chunk.
  p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 31}}));
  EXPECT_FALSE(p.chunks[1].samples());
  run(s, p);
  p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 31}}));
  run(s, p);
  p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 8}}));
  EXPECT_TRUE(p.chunks[1].samples());
  EXPECT_EQ(p.chunks[1].start, 62);
  run(s, p);
  EXPECT_EQ(s.find(2)->n_computed, 70);
  EXPECT_EQ(s.find(2)->n_tokens(), 71);
  s.finish(1);
  s.finish(2);
  EXPECT_EQ(pool.n_free(), 32);
}

TEST(Scheduler, PlansCarryTheirTokensPositionsAndPages) {
  KvManager kv(16, 4, false);
  SchedulerConfig config;
  config.block_size = 4;
  Scheduler s(kv, config);
  s.add(make_seq(1, 6));
  s.add(make_seq(2, 3, 500));
  StepPlan p = s.schedule(0);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(p.chunks[0].pages, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.chunks[1].tokens, (std::vector<int32_t>{500, 501, 502}));
  EXPECT_EQ(p.chunks[1].pages, (std::vector<int32_t>{2}));
  EXPECT_EQ(p.n_logits(), 2);
  // The model's input comes from the plan alone.
  const ForwardBatch batch = make_forward_batch(p.chunks);
  EXPECT_EQ(batch.tokens, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 500, 501, 502}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(batch.logits_rows, (std::vector<int32_t>{5, 8}));
  for (int t = 0; t < batch.n_tokens(); ++t)
    EXPECT_EQ(batch.block_tables[static_cast<size_t>(t)], p.chunks[t < 6 ? 0 : 1].pages.data());
  run(s, p, 9);
  p = s.schedule(0);  // decodes: the sampled token at the next position, over pages grown for it
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].start, 6);
  EXPECT_EQ(p.chunks[0].tokens, (std::vector<int32_t>{9}));
  EXPECT_EQ(p.chunks[0].pages, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.chunks[1].start, 3);
  EXPECT_EQ(p.chunks[1].pages, (std::vector<int32_t>{2}));
  run(s, p);
  s.finish(1);
  s.finish(2);
  EXPECT_EQ(kv.pool().n_free(), 16);
}

// A plan crosses to other processes as bytes (tensor-parallel serving): encoded and decoded it is the same
// plan; cut short, padded, or with a count or id out of range it is refused with a message.
TEST(StepPlanBytes, RoundTripAndMalformedInput) {
  StepPlan plan;
  plan.copies = {{3, 5}, {4, 6}};
  plan.chunks.push_back({11, 0, {100, 101, 102, 103, 104}, {5, 6}, 1});
  plan.chunks.push_back({12, 9, {7}, {0, 1, 2}, 1});
  plan.chunks.push_back({13, 4, {}, {8}, 0});
  plan.preempted = {20, 21};
  plan.imported_pages = {7, 8};
  plan.exports.push_back({11, 0, {5, 6}});
  plan.exports.push_back({12, 2, {2}});
  const std::vector<uint8_t> bytes = encode_step_plan(plan);
  auto back = decode_step_plan(bytes);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back.value(), plan);
  EXPECT_TRUE(decode_step_plan(encode_step_plan(StepPlan{})).ok());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = decode_step_plan(std::span<const uint8_t>(bytes.data(), cut));
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_NE(r.error().find("malformed step plan"), std::string::npos) << cut << ": " << r.error();
  }
  std::vector<uint8_t> padded = bytes;
  padded.push_back(0);
  EXPECT_NE(decode_step_plan(padded).error().find("1 bytes after the plan"), std::string::npos);
  // The first copy's source page (after the magic, the two imported pages and the copy count) made negative;
  // the copy count huge; the first imported page negative.
  std::vector<uint8_t> bad = bytes;
  const int32_t minus_one = -1, huge = 1 << 30;
  std::memcpy(bad.data() + 20, &minus_one, 4);
  EXPECT_NE(decode_step_plan(bad).error().find("negative page id"), std::string::npos);
  bad = bytes;
  std::memcpy(bad.data() + 8, &minus_one, 4);
  EXPECT_NE(decode_step_plan(bad).error().find("negative imported page id"), std::string::npos);
  bad = bytes;
  std::memcpy(bad.data() + 16, &huge, 4);
  EXPECT_NE(decode_step_plan(bad).error().find("bad count of page copies"), std::string::npos);
  bad = bytes;
  bad[0] ^= 1;
  EXPECT_NE(decode_step_plan(bad).error().find("bad magic"), std::string::npos);
}

// Prefill/decode disaggregation's messages cross between processes the same way: each kind round-trips, and
// cut short, padded, of an unknown kind or with a negative id they are refused with a message.
TEST(PrefillMessageBytes, RoundTripAndMalformedInput) {
  std::vector<PrefillMessage> messages;
  PrefillMessage job = prefill_message(PrefillMessageKind::Job, 7);
  job.cache_salt = "salt";
  job.tokens = {1, 2, 3};
  messages.push_back(job);
  messages.push_back(prefill_message(PrefillMessageKind::Cancel, 9));
  messages.push_back(prefill_message(PrefillMessageKind::Stop));
  PrefillMessage pages = prefill_message(PrefillMessageKind::Pages, 7);
  pages.first_page = 2;
  pages.pages = {1, 2, 3, 4, 5, 6};
  messages.push_back(pages);
  PrefillMessage done = prefill_message(PrefillMessageKind::Done, 7);
  done.logits = {0.5f, -1.0f, 2.0f};
  done.n_cached = 16;
  done.queue_ms = 1.5;
  done.compute_ms = 20.25;
  messages.push_back(done);
  PrefillMessage stats = prefill_message(PrefillMessageKind::Stats);
  stats.stats = {64, 10, 20, 1, 2, 300, 100, 12, 0.75};
  messages.push_back(stats);
  messages.push_back(prefill_message(PrefillMessageKind::Stopped));
  for (const PrefillMessage& m : messages) {
    SCOPED_TRACE(static_cast<int>(m.kind));
    const std::vector<uint8_t> bytes = encode_prefill_message(m);
    auto back = decode_prefill_message(bytes);
    ASSERT_TRUE(back.ok()) << back.error();
    EXPECT_EQ(back.value(), m);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      auto r = decode_prefill_message(std::span<const uint8_t>(bytes.data(), cut));
      ASSERT_FALSE(r.ok()) << cut;
      EXPECT_NE(r.error().find("malformed prefill message"), std::string::npos) << r.error();
    }
    std::vector<uint8_t> padded = bytes;
    padded.push_back(0);
    EXPECT_NE(decode_prefill_message(padded).error().find("1 bytes after the message"), std::string::npos);
  }
  std::vector<uint8_t> bad = encode_prefill_message(messages[1]);
  bad[4] = 99;  // the kind, after the magic
  EXPECT_NE(decode_prefill_message(bad).error().find("unknown kind 99"), std::string::npos);
  bad = encode_prefill_message(messages[1]);
  const int64_t minus_one = -1;
  std::memcpy(bad.data() + 5, &minus_one, 8);
  EXPECT_NE(decode_prefill_message(bad).error().find("negative sequence id"), std::string::npos);
  EXPECT_NE(decode_prefill_message(encode_prefill_message(prefill_message(PrefillMessageKind::Job, 1))).error().find("without tokens"),
            std::string::npos);
}

// A prompt prefilled elsewhere joins the running set with pages of its own for its whole prompt, then
// decodes like any other; it waits (nothing changed) while the running set is full or pages are short.
TEST(Scheduler, PrefilledSequenceJoinsTheRunningSetWithItsPages) {
  KvManager kv(4, 4, false);  // 16 positions
  SchedulerConfig config;
  config.block_size = 4;
  config.max_running = 2;
  Scheduler s(kv, config);
  ASSERT_TRUE(s.add_prefilled(make_seq(1, 6)));
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 1}));
  const Sequence* seq = s.find(1);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->n_computed, 6);
  EXPECT_EQ(seq->n_prompt, 6);
  EXPECT_EQ(s.n_running(), 1u);
  EXPECT_FALSE(s.add_prefilled(make_seq(2, 12)));  // 3 pages: 2 are free
  EXPECT_EQ(kv.pool().n_free(), 2);
  EXPECT_EQ(s.find(2), nullptr);
  ASSERT_TRUE(s.add_prefilled(make_seq(3, 3)));
  EXPECT_FALSE(s.add_prefilled(make_seq(4, 1)));  // the running set is full
  s.append_token(1, 9);
  s.append_token(3, 9);
  StepPlan p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {3, 1}}));  // both decode their first token's successor
  EXPECT_EQ(p.chunks[0].start, 6);
  EXPECT_EQ(p.chunks[1].start, 3);
  run(s, p);
  s.finish(1);
  s.finish(3);
  EXPECT_EQ(kv.pool().n_free(), 4);
}

TEST(Scheduler, SharedPromptIsComputedOnceAndOthersWaitForIt) {
  KvManager kv(64, 16, true);
  const BlockPool& pool = kv.pool();
  Scheduler s(kv, SchedulerConfig{});
  // Three requests with a 64-token common prefix and 8 unique tokens each, arriving together.
  for (int64_t id = 1; id <= 3; ++id) {
    Sequence seq = make_seq(id, 64);
    for (int i = 0; i < 8; ++i) seq.tokens.push_back(1000 * static_cast<int32_t>(id) + i);
    s.add(std::move(seq));
  }
  StepPlan p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 72}}));  // the others wait for its four shared blocks
  EXPECT_EQ(s.n_waiting(), 2u);
  run(s, p);
  p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 8}, {3, 8}}));
  EXPECT_EQ(s.find(2)->n_cached_prompt, 64);
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 1, 2, 3, 5}));
  EXPECT_EQ(kv.pages(3), (std::vector<int32_t>{0, 1, 2, 3, 6}));
  for (int32_t b : {0, 1, 2, 3}) EXPECT_EQ(pool.ref_count(b), 3);
  run(s, p);
  for (int64_t id = 1; id <= 3; ++id) s.finish(id);
  EXPECT_EQ(pool.n_in_use(), 0);
  EXPECT_EQ(pool.n_cached(), 7);  // the four shared blocks and each sequence's partly filled tail
  EXPECT_EQ(pool.cached_lru(), (std::vector<int32_t>{4, 5, 6, 3, 2, 1, 0}));
  EXPECT_EQ(pool.n_free() + pool.n_cached(), 64);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndResumesWithTheSameTokens) {
  KvManager kv(6, 4, false);  // 24 tokens of 4-token pages
  const BlockPool& pool = kv.pool();
  SchedulerConfig config;
  config.block_size = 4;
  Scheduler s(kv, config);
  s.add(make_seq(1, 8));
  s.add(make_seq(2, 8, 500));
  StepPlan p = s.schedule(0);
  EXPECT_EQ(chunks(p), (Chunks{{1, 8}, {2, 8}}));
  run(s, p);
  // Each decode step adds a token; at 12 tokens each the pool (6 blocks) is full.
  for (int step = 0; step < 4; ++step) {
    p = s.schedule(0);
    ASSERT_TRUE(p.preempted.empty());
    run(s, p);
  }
  EXPECT_EQ(s.find(1)->n_tokens(), 13);
  p = s.schedule(0);  // both need a fourth block: the newer one gives its blocks up
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}}));
  EXPECT_EQ(s.find(2)->status, SequenceStatus::Waiting);
  EXPECT_EQ(s.find(2)->n_tokens(), 13);  // its generated tokens are kept
  EXPECT_EQ(s.find(2)->n_computed, 0);
  EXPECT_EQ(s.n_preemptions(), 1);
  run(s, p);
  s.finish(1);
  p = s.schedule(0);  // recomputed from the start, then it samples its next token
  EXPECT_EQ(chunks(p), (Chunks{{2, 13}}));
  EXPECT_TRUE(p.chunks[0].samples());
  run(s, p);
  s.finish(2);
  EXPECT_EQ(pool.n_free(), 6);
}

TEST(Scheduler, CacheFriendlyOrderAgesSoNothingStarves) {
  KvManager kv(64, 4, true);
  SchedulerConfig config;
  config.block_size = 4;
  config.max_running = 1;
  config.max_skips = 2;
  Scheduler s(kv, config);
  s.add(make_seq(1, 8));
  run(s, s.schedule(0));
  s.finish(1);  // its 8 tokens stay cached
  s.add(make_seq(2, 8, 700));   // nothing cached
  s.add(make_seq(3, 12));       // 8 cached tokens
  s.add(make_seq(4, 12));       // 8 cached tokens
  s.add(make_seq(5, 12));
  std::vector<int64_t> order;
  while (s.has_work()) {
    StepPlan p = s.schedule(0);
    for (const ScheduledChunk& c : p.chunks) order.push_back(c.seq_id);
    s.commit(p);
    for (const ScheduledChunk& c : p.chunks) s.finish(c.seq_id);
  }
  // 3 and 4 jump ahead of 2 by their cache hits, then 2 has been passed over twice and goes first.
  EXPECT_EQ(order, (std::vector<int64_t>{3, 4, 2, 5}));
}

TEST(Scheduler, ForksShareBlocksAndCopyTheOneTheyWrite) {
  KvManager kv(8, 4, false);
  const BlockPool& pool = kv.pool();
  SchedulerConfig config;
  config.block_size = 4;
  Scheduler s(kv, config);
  s.add(make_seq(1, 6));
  run(s, s.schedule(0));
  ASSERT_NE(s.fork(1, 2), nullptr);
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.ref_count(1), 2);
  s.append_token(2, 9);
  const StepPlan p = s.schedule(0);
  // Both write position 6 in the shared block 1: the first to write takes a copy.
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, 1);
  EXPECT_EQ(p.copies[0].dst, 2);
  EXPECT_EQ(kv.pages(1), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(kv.pages(2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.ref_count(1), 1);
  s.commit(p);
  s.finish(1);
  s.finish(2);
  EXPECT_EQ(pool.n_free(), 8);
}

TEST(Scheduler, StaticAndDynamicBatchesRunToCompletion) {
  for (BatchPolicy policy : {BatchPolicy::Static, BatchPolicy::Dynamic}) {
    KvManager kv(64, 16, false);
    SchedulerConfig config;
    config.policy = policy;
    config.batch_size = 2;
    config.batch_wait_ms = 50;
    Scheduler s(kv, config);
    s.add(make_seq(1, 4, 100, 0));
    EXPECT_TRUE(s.schedule(10).empty());  // waits for a second request
    s.add(make_seq(2, 4, 100, 20));
    StepPlan p = s.schedule(30);
    EXPECT_EQ(chunks(p), (Chunks{{1, 4}, {2, 4}}));
    run(s, p);
    s.add(make_seq(3, 4, 100, 40));
    s.add(make_seq(4, 4, 100, 40));
    p = s.schedule(45);  // the running batch finishes first: no one joins it
    EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 1}}));
    run(s, p);
    s.finish(1);
    s.finish(2);
    p = s.schedule(50);
    EXPECT_EQ(chunks(p), (Chunks{{3, 4}, {4, 4}}));
    run(s, p);
    s.finish(3);
    s.finish(4);
    // A lone request: dynamic batching runs it once it waited batch_wait_ms; static once arrivals stop.
    s.add(make_seq(5, 4, 100, 100));
    EXPECT_TRUE(s.schedule(120).empty());
    EXPECT_EQ(chunks(s.schedule(151)), (Chunks{{5, 4}}));
  }
}

}  // namespace
}  // namespace kestrel
