// The serving engine on a real model (stories260K): concurrent requests give each request's output alone,
// preemption under a tiny pool changes nothing, cancellation frees every block, shared prompts hit the
// prefix cache, n > 1 choices, logprobs, and bad requests are refused.
#include <map>

#include "engine/engine.h"
#include "stories_model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = test::shared_dir();
    if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
    test::load_stories(shared, model_, tokenizer_);
    if (HasFatalFailure()) return;
  }

  // 16 prompts of different lengths; some share long prefixes.
  std::vector<std::vector<int32_t>> prompts() const {
    const std::vector<std::string> texts = {
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.",
        "One day, a big dog came to the park.",
        "Tom and Sue went to the beach. They saw a big wave and",
        "The cat sat on the mat."};
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < 16; ++i) {
      auto ids = tokenizer_->encode(texts[i % texts.size()], true);
      const size_t keep = std::max<size_t>(2, ids.size() - (i / texts.size()) * 3);  // prefixes of each text
      ids.resize(std::min(ids.size(), keep));
      out.push_back(ids);
    }
    return out;
  }

  static Request greedy_request(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    Request r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    return r;
  }

  // Steps until idle; tokens per (request, choice).
  static std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> drain(Engine& engine, int max_steps = 10000) {
    std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> out;
    for (int i = 0; i < max_steps && engine.has_work(); ++i)
      for (const StepOutput& o : engine.step())
        for (const GeneratedToken& t : o.tokens) out[{o.request_id, o.index}].push_back(t.token);
    EXPECT_FALSE(engine.has_work());
    return out;
  }

  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int32_t max_tokens, KvTypes kv_types = KvType::F16) {
    EngineConfig config;
    config.n_blocks = 64;
    config.prefix_caching = false;
    config.kv_types = kv_types;
    Engine engine(*model_, pool_, config);
    auto id = engine.add_request(greedy_request(prompt, max_tokens));
    EXPECT_TRUE(id.ok());
    return drain(engine)[{*id, 0}];
  }

  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(EngineTest, ConcurrentGreedyRequestsMatchEachRunAlone) {
  for (int32_t block_size : {16, 4}) {
    SCOPED_TRACE("block size " + std::to_string(block_size));
    const auto ps = prompts();
    EngineConfig config;
    config.n_blocks = 4096 / block_size;
    config.scheduler.block_size = block_size;
    config.scheduler.max_batch_tokens = 48;  // prompts are chunked and mixed with decodes
    Engine engine(*model_, pool_, config);
    std::vector<int64_t> ids;
    for (const auto& p : ps) ids.push_back(engine.add_request(greedy_request(p, 24)).value());
    const auto got = drain(engine);
    for (size_t i = 0; i < ps.size(); ++i) {
      ASSERT_EQ(got.at({ids[i], 0}).size(), 24u) << i;
      EXPECT_EQ(got.at({ids[i], 0}), alone(ps[i], 24)) << "request " << i;
    }
    const EngineStats s = engine.stats();
    EXPECT_GT(s.prompt_tokens_cached, 0);  // the repeated texts hit the prefix cache
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.kv_blocks_used + s.kv_blocks_cached + s.kv_blocks_free, s.kv_blocks_total);
    EXPECT_EQ(s.generated_tokens, 16 * 24);
    // At the peak, each running sequence leaves at most part of its last block unfilled.
    EXPECT_GT(s.kv_peak_blocks_used, 16);
    EXPECT_LT(s.kv_peak_unused_tokens, 16 * block_size);
  }
}

TEST_F(EngineTest, PreemptionUnderATinyPoolGivesIdenticalOutputs) {
  const auto ps = prompts();
  for (bool caching : {false, true}) {
    EngineConfig config;
    config.n_blocks = 10;  // 160 tokens for 6 sequences of up to ~60
    config.scheduler.block_size = 16;
    config.prefix_caching = caching;
    Engine engine(*model_, pool_, config);
    std::vector<int64_t> ids;
    for (size_t i = 0; i < 6; ++i) ids.push_back(engine.add_request(greedy_request(ps[i], 32)).value());
    const auto got = drain(engine);
    EXPECT_GT(engine.stats().preemptions, 0) << caching;
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got.at({ids[i], 0}), alone(ps[i], 32)) << i << " " << caching;
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  }
}

// Quantized pages (codes and scales per token, rotated for tq types) keep the engine's invariants: batched,
// chunked, prefix-cached (cached pages stay compressed) and preempted sequences give each one's output alone
// with the same KV types, since each token's row is encoded the same way whatever runs beside it.
TEST_F(EngineTest, QuantizedPagesGiveEachRequestsOutputAlone) {
  const auto ps = prompts();
  for (KvTypes types : {KvTypes(KvType::Q8_0), KvTypes(KvType::TQ3), KvTypes(KvType::FP8, KvType::Q4_0)}) {
    SCOPED_TRACE(types.name());
    for (int32_t n_blocks : {256, 10}) {  // room for all, and preemption
      EngineConfig config;
      config.n_blocks = n_blocks;
      config.scheduler.block_size = 16;
      config.scheduler.max_batch_tokens = 48;
      config.kv_types = types;
      Engine engine(*model_, pool_, config);
      std::vector<int64_t> ids;
      for (size_t i = 0; i < 8; ++i) ids.push_back(engine.add_request(greedy_request(ps[i], 24)).value());
      const auto got = drain(engine);
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got.at({ids[i], 0}), alone(ps[i], 24, types)) << i;
      if (n_blocks == 10) EXPECT_GT(engine.stats().preemptions, 0);
      else EXPECT_GT(engine.stats().prompt_tokens_cached, 0);
    }
  }
}

TEST_F(EngineTest, CancelledRequestsLeaveNoBlocksInUse) {
  EngineConfig config;
  config.n_blocks = 128;
  Engine engine(*model_, pool_, config);
  std::vector<int64_t> ids;
  for (const auto& p : prompts()) ids.push_back(engine.add_request(greedy_request(p, 100)).value());
  for (int i = 0; i < 5; ++i) engine.step();
  EXPECT_GT(engine.stats().kv_blocks_used, 0);
  for (int64_t id : ids) engine.cancel(id);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().n_running + engine.stats().n_waiting, 0u);
  int cancelled = 0;
  for (const StepOutput& o : engine.step()) cancelled += o.finish == FinishReason::Cancelled;
  EXPECT_EQ(cancelled, 16);
  EXPECT_FALSE(engine.has_work());
  engine.cancel(12345);  // unknown ids are ignored
}

TEST_F(EngineTest, SecondRequestReusesTheFirstOnesPrompt) {
  const auto p = prompts()[0];
  EngineConfig config;
  config.n_blocks = 64;
  Engine engine(*model_, pool_, config);
  const int64_t a = engine.add_request(greedy_request(p, 8)).value();
  const auto first = drain(engine);
  const int64_t b = engine.add_request(greedy_request(p, 8)).value();
  int32_t cached = -1;
  std::vector<int32_t> second;
  while (engine.has_work())
    for (const StepOutput& o : engine.step()) {
      if (cached < 0) cached = o.n_cached_prompt;
      for (const auto& t : o.tokens) second.push_back(t.token);
    }
  EXPECT_EQ(cached, static_cast<int32_t>(p.size()) - 1);  // all but the last token, whose logits are needed
  EXPECT_EQ(second, first.at({a, 0}));
  EXPECT_NE(a, b);
}

TEST_F(EngineTest, ChoicesShareThePromptAndSampleIndependently) {
  EngineConfig config;
  config.n_blocks = 64;
  Engine engine(*model_, pool_, config);
  Request r = greedy_request(prompts()[1], 12);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.seed = 5;
  r.n = 3;
  r.top_logprobs = 2;
  const int64_t id = engine.add_request(r).value();
  std::map<int32_t, std::vector<int32_t>> choices;
  std::map<int32_t, FinishReason> finish;
  while (engine.has_work())
    for (const StepOutput& o : engine.step()) {
      ASSERT_EQ(o.request_id, id);
      for (const auto& t : o.tokens) {
        choices[o.index].push_back(t.token);
        ASSERT_EQ(t.top.size(), 2u);
        EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
        EXPECT_LE(t.logprob, 0.0f);
        EXPECT_GE(t.top[0].logprob, t.logprob);
      }
      if (o.finish != FinishReason::None) finish[o.index] = o.finish;
    }
  ASSERT_EQ(choices.size(), 3u);
  for (const auto& [index, tokens] : choices) EXPECT_EQ(tokens.size(), 12u) << index;
  EXPECT_TRUE(choices[0] != choices[1] || choices[1] != choices[2]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(finish[i], FinishReason::Length);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, StopTokensEndAChoiceWithoutBeingReturned) {
  EngineConfig config;
  config.n_blocks = 64;
  const auto p = prompts()[0];
  const std::vector<int32_t> reference = alone(p, 10);
  Engine engine(*model_, pool_, config);
  Request r = greedy_request(p, 10);
  r.stop_tokens = {reference[4]};
  const int64_t id = engine.add_request(r).value();
  std::vector<int32_t> got;
  FinishReason finish = FinishReason::None;
  while (engine.has_work())
    for (const StepOutput& o : engine.step()) {
      EXPECT_EQ(o.request_id, id);
      for (const auto& t : o.tokens) got.push_back(t.token);
      if (o.finish != FinishReason::None) finish = o.finish;
    }
  const auto first_stop = std::find(reference.begin(), reference.end(), reference[4]) - reference.begin();
  EXPECT_EQ(got, std::vector<int32_t>(reference.begin(), reference.begin() + first_stop));
  EXPECT_EQ(finish, FinishReason::Stop);
}

TEST_F(EngineTest, BadRequestsAreRefusedWithAReason) {
  EngineConfig config;
  config.n_blocks = 8;  // 128 tokens per sequence at most
  Engine engine(*model_, pool_, config);
  EXPECT_EQ(engine.max_seq_len(), 128);
  auto expect_error = [&](Request r, const std::string& what) {
    auto id = engine.add_request(std::move(r));
    ASSERT_FALSE(id.ok()) << what;
    EXPECT_NE(id.error().find(what), std::string::npos) << id.error();
  };
  expect_error(greedy_request({}, 4), "empty");
  expect_error(greedy_request({1, 99999}, 4), "outside the vocabulary");
  expect_error(greedy_request(std::vector<int32_t>(128, 5), 4), "context");
  expect_error(greedy_request({1, 2}, 0), "max_tokens");
  Request r = greedy_request({1, 2}, 4);
  r.sampling.temperature = -1;
  expect_error(r, "temperature");
  r = greedy_request({1, 2}, 4);
  r.n = 0;
  expect_error(r, "n must");
  EXPECT_FALSE(engine.has_work());
  // A request near the limit stops at the context, with reason length.
  auto id = engine.add_request(greedy_request(std::vector<int32_t>(120, 5), 50));
  ASSERT_TRUE(id.ok());
  const auto got = drain(engine);
  EXPECT_EQ(got.at({*id, 0}).size(), 8u);
}

}  // namespace
}  // namespace kestrel
