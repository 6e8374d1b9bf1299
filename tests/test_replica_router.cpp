// The data-parallel router (server/replica_router.h) over fake replicas: cache-aware routing sends a prompt
// to the replica that saw its prefix, load wins when replicas drift apart, new prefixes spread out,
// round-robin alternates, refusals and cancellations reach the right replica; and `kestrel serve --dp 2`
// answers greedy requests as one process generates, its /metrics showing the router.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "server/replica_router.h"
#include "test_support.h"

namespace kestrel {
namespace {

class FakeReplica final : public RequestQueue {
 public:
  bool submit(Request request, std::shared_ptr<RequestChannel>) override {
    if (refuse) return false;
    prompts.push_back(request.prompt);
    return true;
  }
  void cancel(const std::shared_ptr<RequestChannel>& channel) override {
    channel->cancel();
    ++cancels;
  }
  size_t n_pending() const override { return pending; }
  size_t max_pending() const override { return 10; }

  std::vector<std::vector<int32_t>> prompts;
  size_t pending = 0;
  int cancels = 0;
  bool refuse = false;
};

Request prompt_request(std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  return r;
}

// A prompt of a shared prefix `prefix` (64 tokens) and a distinct tail.
std::vector<int32_t> prompt_with(int prefix, int tail) {
  std::vector<int32_t> p(64);
  std::iota(p.begin(), p.end(), prefix * 1000);
  for (int i = 0; i < 8; ++i) p.push_back(tail * 10 + i);
  return p;
}

TEST(ReplicaRouter, CacheAwareKeepsEachPrefixOnOneReplica) {
  FakeReplica a, b;
  ReplicaRouter router({&a, &b}, RouterConfig{});
  // Two system prompts: the first goes to replica 0, the second spreads to replica 1 (fewer tokens held).
  ASSERT_TRUE(router.submit(prompt_request(prompt_with(1, 0)), std::make_shared<RequestChannel>()));
  ASSERT_TRUE(router.submit(prompt_request(prompt_with(2, 0)), std::make_shared<RequestChannel>()));
  EXPECT_EQ(a.prompts.size(), 1u);
  EXPECT_EQ(b.prompts.size(), 1u);
  // Later requests follow their prefix.
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(router.submit(prompt_request(prompt_with(i % 2 ? 2 : 1, i)), std::make_shared<RequestChannel>()));
  }
  for (const auto& p : a.prompts) EXPECT_EQ(p[0], 1000);
  for (const auto& p : b.prompts) EXPECT_EQ(p[0], 2000);
  EXPECT_EQ(router.stats().by_prefix, 6u);
  // Loads drifted apart past the slack: the least loaded wins over the prefix.
  a.pending = 20;
  EXPECT_EQ(router.choose(prompt_with(1, 9)), 1u);
  a.pending = 2;  // within the slack: the prefix again
  EXPECT_EQ(router.choose(prompt_with(1, 9)), 0u);
  // A short match (under half the prompt) does not count: least loaded.
  std::vector<int32_t> mostly_new = prompt_with(1, 9);
  for (size_t i = 4; i < mostly_new.size(); ++i) mostly_new[i] = -1 - static_cast<int32_t>(i);
  EXPECT_EQ(router.choose(mostly_new), 1u);
}

TEST(ReplicaRouter, RoundRobinAlternatesAndRefusalsAndCancelsReachTheReplica) {
  FakeReplica a, b;
  RouterConfig config;
  config.policy = RoutePolicy::RoundRobin;
  ReplicaRouter router({&a, &b}, config);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int i = 0; i < 4; ++i) {
    channels.push_back(std::make_shared<RequestChannel>());
    ASSERT_TRUE(router.submit(prompt_request(prompt_with(1, i)), channels.back()));
  }
  EXPECT_EQ(a.prompts.size(), 2u);
  EXPECT_EQ(b.prompts.size(), 2u);
  router.cancel(channels[1]);  // went to b
  EXPECT_EQ(b.cancels, 1);
  EXPECT_EQ(a.cancels, 0);
  EXPECT_TRUE(channels[1]->cancelled());
  auto unknown = std::make_shared<RequestChannel>();
  router.cancel(unknown);  // never routed: only marked
  EXPECT_TRUE(unknown->cancelled());
  EXPECT_EQ(a.cancels + b.cancels, 1);
  a.refuse = true;
  EXPECT_FALSE(router.submit(prompt_request(prompt_with(1, 5)), std::make_shared<RequestChannel>()));  // a's turn: refused
  EXPECT_EQ(router.stats().routed, (std::vector<uint64_t>{2, 2}));
  a.pending = 3;
  b.pending = 4;
  EXPECT_EQ(router.n_pending(), 7u);
  EXPECT_EQ(router.max_pending(), 20u);
}

TEST(ReplicaRouter, ServeWithTwoReplicasAnswersWhatOneProcessGenerates) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/tests/scripts/serve_equals_generate.sh";
  for (const char* policy : {"cache", "round-robin"}) {
    SCOPED_TRACE(policy);
    std::string out;
    EXPECT_EQ(test::run_command("SERVE_ARGS='--dp 2 -t 1 --dp-policy " + std::string(policy) + "' bash " + script + " " +
                                    KESTREL_BINARY + " " + shared + "/models/stories260K/stories260K.gguf 2>&1",
                                out),
              0)
        << out;
    EXPECT_NE(out.find("serve equals generate on 6 prompts"), std::string::npos) << out;
    EXPECT_NE(out.find("kestrel_router_requests_total{replica=\"1\"}"), std::string::npos) << out;
    EXPECT_NE(out.find("kestrel_replica_prompt_tokens_total{replica=\"1\"}"), std::string::npos) << out;
  }
}

#if KESTREL_HAVE_MPI
// Replicas on their own ranks (`mpirun -np D*G serve --dp D ...`): rank 0 schedules every replica and the
// remote ones run their forward passes on their ranks; the text is one process's, and replica 1 (on other
// ranks) computed prompts.
TEST(ReplicaRouter, ReplicasOnOtherRanksAnswerWhatOneProcessGenerates) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/tests/scripts/serve_equals_generate.sh";
  struct Case {
    int processes;
    std::string flags;
  };
  // -b 4: prompts in chunks of a few tokens, so some steps sample nothing (no logits come back).
  for (const Case& c : {Case{2, "--dp 2 --dp-policy round-robin -b 4"}, Case{4, "--dp 2 --tp 2 --dp-policy cache"}}) {
    SCOPED_TRACE(c.flags);
    std::string out;
    EXPECT_EQ(test::run_command(std::string(test::kMpiAsRoot) + " KESTREL_LAUNCHER='" +
                                    test::mpirun_launcher(c.processes, 300) + "' SERVE_ARGS='" + c.flags + " -t 1' bash " +
                                    script + " " + KESTREL_BINARY + " " + shared + "/models/stories260K/stories260K.gguf 2>&1",
                                out),
              0)
        << out;
    EXPECT_NE(out.find("serve equals generate on 6 prompts"), std::string::npos) << out;
    const std::string tokens = "kestrel_replica_prompt_tokens_total{replica=\"1\"} ";
    const size_t at = out.find(tokens);
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_GT(std::stol(out.substr(at + tokens.size())), 0) << out;
  }
}

TEST(ReplicaRouter, ReplicasOverRanksThatDoNotDivideAreRefused) {
  KESTREL_REQUIRE_SHARED(shared);
  std::string out;
  const int status = test::run_command(test::mpirun_command(3, std::string(KESTREL_BINARY) + " serve -m " + shared +
                                                                   "/models/stories260K/stories260K.gguf --dp 2 -t 1"),
                                       out);
  EXPECT_NE(status, 0);
  EXPECT_NE(status, 124) << out;
  EXPECT_NE(out.find("do not split into --dp 2 replicas"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace kestrel
