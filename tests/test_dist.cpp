// dist/communicator.h: the one-process communicator, and Open MPI's across processes started by mpirun
// (tests/dist/dist_check.cpp checks every collective on every rank).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/tensor_parallel_plan.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Dist, LocalCommunicatorIsOneRank) {
  auto c = make_local_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->backend(), "local");
  std::vector<float> v = {1.5f, -2.f, 3.f};
  c->all_reduce_sum(v.data(), v.size());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.f, 3.f}));
  std::vector<float> all(3, 0.f);
  c->all_gather(v.data(), 3, all.data());
  EXPECT_EQ(all, v);
  c->barrier();
  EXPECT_EQ(c->stats().messages, 0u);
}

TEST(Dist, WithoutMpirunTheWorldIsOneLocalProcess) {
  if (launched_by_mpirun()) GTEST_SKIP() << "this test process itself runs under mpirun";
  auto c = launch_communicator();
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ((*c)->backend(), "local");
  EXPECT_EQ((*c)->size(), 1);
}

// TinyLlama-1.1B's shape (GQA 32 / 4 heads, 5632 FFN channels, 64-wide heads), Q4_0 blocks.
TpModelShape tinyllama_shape(int n_layers = 2) {
  TpModelShape s;
  s.layers.assign(static_cast<size_t>(n_layers), {32, 4, 5632});
  s.head_dim_v = 64;
  s.n_vocab = 32000;
  s.attn_output_granule = s.ffn_down_granule = 32;
  return s;
}

// Over all ranks, every query head, FFN channel and vocabulary row is some rank's exactly once, in rank
// order, and each rank's query heads read only KV heads it holds.
void expect_partition(const TpModelShape& shape, int n_ranks) {
  SCOPED_TRACE(std::to_string(n_ranks) + " ranks");
  int next_vocab = 0;
  std::vector<int> next_head(shape.layers.size(), 0), next_ff(shape.layers.size(), 0);
  for (int r = 0; r < n_ranks; ++r) {
    auto shard = plan_tensor_parallel(shape, n_ranks, r);
    ASSERT_TRUE(shard.ok()) << shard.error();
    EXPECT_EQ(shard->vocab_begin, next_vocab);
    next_vocab += shard->n_vocab;
    ASSERT_EQ(shard->vocab_offsets.size(), static_cast<size_t>(n_ranks) + 1);
    EXPECT_EQ(shard->vocab_offsets[static_cast<size_t>(r)], shard->vocab_begin);
    EXPECT_EQ(shard->vocab_offsets[static_cast<size_t>(r) + 1], next_vocab);
    for (size_t il = 0; il < shape.layers.size(); ++il) {
      const TpLayerShard& l = shard->layers[il];
      const int group = shape.layers[il].n_heads / shape.layers[il].n_kv_heads;
      EXPECT_EQ(l.head_begin, next_head[il]);
      EXPECT_EQ(l.ff_begin, next_ff[il]);
      next_head[il] += l.n_heads;
      next_ff[il] += l.n_ff;
      EXPECT_EQ(l.head_begin / group, l.kv_head_begin) << "the first query head reads the first KV head held";
      EXPECT_EQ((l.head_begin + l.n_heads - 1) / group, l.kv_head_begin + l.n_kv_heads - 1) << "and the last the last";
      if (!l.ffn_down_whole) {
        EXPECT_EQ(l.n_ff % shape.ffn_down_granule, 0);
      }
    }
  }
  EXPECT_EQ(next_vocab, shape.n_vocab);
  for (size_t il = 0; il < shape.layers.size(); ++il) {
    EXPECT_EQ(next_head[il], shape.layers[il].n_heads);
    EXPECT_EQ(next_ff[il], shape.layers[il].n_ff);
  }
}

TEST(TensorParallelPlan, SplitsHeadsKvHeadsChannelsAndVocabulary) {
  const TpModelShape shape = tinyllama_shape();
  for (int n : {1, 2, 4, 8, 16}) expect_partition(shape, n);
  auto two = plan_tensor_parallel(shape, 2, 1);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->layers[0].head_begin, 16);
  EXPECT_EQ(two->layers[0].n_kv_heads, 2);
  EXPECT_EQ(two->layers[0].kv_head_begin, 2);
  EXPECT_EQ(two->layers[0].ff_begin, 2816);
  EXPECT_EQ(two->vocab_begin, 16000);
  // 8 ranks over 4 KV heads: each KV head on two ranks, each with 4 of its 8 query heads
  auto eight = plan_tensor_parallel(shape, 8, 5);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->layers[0].head_begin, 20);
  EXPECT_EQ(eight->layers[0].n_kv_heads, 1);
  EXPECT_EQ(eight->layers[0].kv_head_begin, 2);
}

TEST(TensorParallelPlan, UnevenChannelsAndPerLayerShapes) {
  TpModelShape shape = tinyllama_shape(3);
  shape.layers[1] = {16, 16, 96};   // MHA, FFN of 3 granules over 2 ranks: 64 + 32
  shape.layers[2] = {8, 2, 4096};
  shape.n_vocab = 301;              // 151 + 150
  for (int n : {1, 2}) expect_partition(shape, n);
  auto second = plan_tensor_parallel(shape, 2, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->layers[1].ff_begin, 64);
  EXPECT_EQ(second->layers[1].n_ff, 32);
  EXPECT_EQ(second->layers[1].n_kv_heads, 8);
  EXPECT_EQ(second->n_vocab, 150);
}

TEST(TensorParallelPlan, ShapesThatCannotSplitAreNamed) {
  const auto error = [](const TpModelShape& shape, int n) {
    auto plan = plan_tensor_parallel(shape, n, 0);
    return plan.ok() ? std::string("(no error)") : plan.error();
  };
  EXPECT_NE(error(tinyllama_shape(), 3).find("32 attention heads do not split over 3"), std::string::npos) << error(tinyllama_shape(), 3);
  TpModelShape kv3 = tinyllama_shape();
  kv3.layers[1] = {24, 3, 5632};
  EXPECT_NE(error(kv3, 4).find("layer 1: 3 KV heads do not split over 4"), std::string::npos) << error(kv3, 4);
  TpModelShape k_quants = tinyllama_shape();
  k_quants.attn_output_granule = k_quants.ffn_down_granule = 256;
  auto eight = plan_tensor_parallel(k_quants, 8, 0);  // 4 heads x 64 = one 256-column block
  ASSERT_TRUE(eight.ok());
  EXPECT_FALSE(eight->layers[0].attn_output_whole);
  auto sixteen = plan_tensor_parallel(k_quants, 16, 3);  // 2 heads x 64: half a block, so the whole matrix
  ASSERT_TRUE(sixteen.ok());
  EXPECT_TRUE(sixteen->layers[0].attn_output_whole);
  EXPECT_EQ(sixteen->layers[0].head_begin, 6);
  TpModelShape narrow = tinyllama_shape();
  narrow.layers[0].n_ff = 64;  // two 32-column blocks over 4 ranks: channel by channel, ffn_down whole
  auto by_channel = plan_tensor_parallel(narrow, 4, 3);
  ASSERT_TRUE(by_channel.ok());
  EXPECT_TRUE(by_channel->layers[0].ffn_down_whole);
  EXPECT_FALSE(by_channel->layers[1].ffn_down_whole);
  EXPECT_EQ(by_channel->layers[0].ff_begin, 48);
  EXPECT_EQ(by_channel->layers[0].n_ff, 16);
  expect_partition(narrow, 4);
  narrow.layers[0].n_ff = 3;
  EXPECT_NE(error(narrow, 4).find("3 FFN channels do not split over 4"), std::string::npos) << error(narrow, 4);
  EXPECT_FALSE(plan_tensor_parallel(tinyllama_shape(), 2, 2).ok());
}

#if KESTREL_HAVE_MPI
using test::mpirun_command;

TEST(Dist, MpiCollectivesAgreeOnEveryRank) {
  for (int n : {2, 3}) {
    std::string out;
    ASSERT_EQ(test::run_command(mpirun_command(n, KESTREL_DIST_CHECK), out), 0) << out;
    for (int r = 0; r < n; ++r)
      EXPECT_NE(out.find("rank " + std::to_string(r) + " of " + std::to_string(n) + ": ok (mpi)"), std::string::npos) << out;
  }
}

TEST(Dist, ARankThatDiesOrAbortsEndsTheJob) {
  std::string out;
  int status = test::run_command(mpirun_command(3, std::string(KESTREL_DIST_CHECK) + " --fail-rank 1"), out);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(status, 124) << "the job hung\n" << out;
  status = test::run_command(mpirun_command(2, std::string(KESTREL_DIST_CHECK) + " --abort-rank 0"), out);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(status, 124) << "the job hung\n" << out;
  EXPECT_NE(out.find("rank 0: asked to abort"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace kestrel
