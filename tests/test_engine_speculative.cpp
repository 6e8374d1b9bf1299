// Speculative decoding in the serving engine: greedy output identical to the plain engine's, one request
// at a time and 8 concurrent, with a draft model (good and poor) and n-gram drafts at several K; the same
// under preemption, chunked prefill, prefix caching and n > 1; sampled tokens distributed as without
// speculation; logprobs unchanged; speculation off past spec.max_batch decoding sequences.
#include <deque>
#include <map>
#include <random>

#include "engine/engine.h"
#include "spec_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

using Outputs = std::map<int64_t, std::vector<std::vector<int32_t>>>;  // request -> tokens per choice

EngineConfig engine_config(int32_t n_blocks, int32_t block_size, int32_t max_spec_batch) {
  EngineConfig c;
  c.n_blocks = n_blocks;
  c.scheduler.block_size = block_size;
  c.scheduler.max_running = 16;
  c.spec.max_batch = max_spec_batch;
  c.spec.measured = false;  // speculate at every step (the controller has its own test)
  return c;
}

Request make_request(const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t n = 1) {
  Request r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

// Runs the requests with at most `concurrency` in flight (a new one joins as one finishes); outputs in
// request order.
std::vector<std::vector<std::vector<int32_t>>> run(Engine& engine, const std::vector<Request>& requests, size_t concurrency) {
  std::vector<std::vector<std::vector<int32_t>>> out(requests.size());
  std::map<int64_t, size_t> index_of;
  std::map<int64_t, int32_t> choices_left;
  size_t next = 0;
  const auto submit = [&] {
    while (next < requests.size() && index_of.size() < concurrency) {
      auto id = engine.add_request(requests[next]);
      EXPECT_TRUE(id.ok()) << id.error();
      out[next].resize(static_cast<size_t>(requests[next].n));
      choices_left[*id] = requests[next].n;
      index_of[*id] = next++;
    }
  };
  submit();
  for (int steps = 0; engine.has_work() && steps < 100000; ++steps) {
    for (const StepOutput& o : engine.step()) {
      const size_t i = index_of.at(o.request_id);
      for (const GeneratedToken& t : o.tokens) out[i][static_cast<size_t>(o.index)].push_back(t.token);
      if (o.finish != FinishReason::None && --choices_left[o.request_id] == 0) index_of.erase(o.request_id);
    }
    submit();
  }
  EXPECT_EQ(next, requests.size());
  EXPECT_FALSE(engine.has_work());
  return out;
}

// 50 prompts of random tokens; every third repeats itself (n-gram hits), every fifth starts with the
// first prompt (prefix-cache hits).
std::vector<std::vector<int32_t>> random_prompts(size_t n) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(3, 299);
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> p(4 + i % 13);
    for (auto& t : p) t = token(rng);
    if (i % 3 == 0) p.insert(p.end(), p.begin(), p.end());
    if (i % 5 == 4) p.insert(p.begin(), out[0].begin(), out[0].end());
    out.push_back(p);
  }
  return out;
}

class EngineSpeculative : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pair_.target && pair_.draft && pair_.poor_draft); }
  // The plain engine's greedy output, one request at a time.
  std::vector<std::vector<std::vector<int32_t>>> plain(const std::vector<Request>& requests) {
    Engine engine(*pair_.target, pool_, engine_config(512, 16, 1));
    return run(engine, requests, 1);
  }
  test::Pair pair_;
  ThreadPool pool_{2};
};

TEST_F(EngineSpeculative, GreedyOutputIsThePlainEnginesAloneAndConcurrent) {
  std::vector<Request> requests;
  for (const auto& p : random_prompts(50)) requests.push_back(make_request(p, 40));
  const auto expected = plain(requests);
  struct Setup {
    const char* name;
    const Model* draft;
    SpeculativeConfig spec;
  };
  const std::vector<Setup> setups = {
      {"draft K=1", pair_.draft.get(), {.draft_max = 1}},
      {"draft K=4", pair_.draft.get(), {.draft_max = 4}},
      {"draft K=8", pair_.draft.get(), {.draft_max = 8}},
      {"draft K=5 fixed", pair_.draft.get(), {.draft_max = 5, .adaptive = false}},
      {"poor draft K=4", pair_.poor_draft.get(), {.draft_max = 4}},
      {"n-gram K=2", nullptr, {.draft_max = 2, .ngram = 3}},
      {"n-gram K=6", nullptr, {.draft_max = 6, .ngram = 3}},
  };
  for (const Setup& s : setups) {
    for (size_t concurrency : {1, 8}) {
      SCOPED_TRACE(std::string(s.name) + ", " + std::to_string(concurrency) + " concurrent");
      EngineConfig config = engine_config(512, 16, 16);
      config.spec = s.spec;
      config.spec.max_batch = 16;
      config.spec.measured = false;
      Engine engine(*pair_.target, pool_, config, s.draft);
      const auto got = run(engine, requests, concurrency);
      for (size_t i = 0; i < requests.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "prompt " << i;
      const EngineStats st = engine.stats();
      EXPECT_TRUE(st.speculative);
      EXPECT_GT(st.spec.drafted, 0);
      if (s.draft == pair_.draft.get()) {
        EXPECT_GT(st.spec.accepted, st.spec.drafted / 2);  // the pair mostly agrees
      }
      EXPECT_LT(st.steps, 50 * 41 / (concurrency == 1 ? 1 : 4));  // speculation saved forwards
      EXPECT_EQ(st.generated_tokens, 50 * 40);
      EXPECT_EQ(st.kv_blocks_used, 0);
    }
  }
}

TEST_F(EngineSpeculative, PreemptionChunkedPrefillPrefixCacheAndChoicesKeepTheOutput) {
  std::vector<Request> requests;
  const auto prompts = random_prompts(12);
  for (size_t i = 0; i < prompts.size(); ++i) requests.push_back(make_request(prompts[i], 48, i % 4 == 1 ? 2 : 1));
  auto expected = plain(requests);
  for (const Model* draft : {static_cast<const Model*>(pair_.draft.get()), static_cast<const Model*>(nullptr)}) {
    for (bool caching : {true, false}) {
      SCOPED_TRACE(std::string(draft ? "draft model" : "n-gram") + (caching ? ", prefix cache" : ""));
      EngineConfig config = engine_config(40, 4, 16);  // 160 tokens for 8 sequences of up to ~80
      config.prefix_caching = caching;
      config.scheduler.max_batch_tokens = 12;          // prompts in chunks, drafts cut to the budget
      config.spec.draft_max = 6;
      config.spec.ngram = draft ? 0 : 2;
      Engine engine(*pair_.target, pool_, config, draft);
      const auto got = run(engine, requests, 8);
      for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_EQ(got[i].size(), expected[i].size());
        // Greedy choices of one request are the same tokens.
        for (const auto& choice : got[i]) EXPECT_EQ(choice, expected[i][0]) << "prompt " << i;
      }
      const EngineStats st = engine.stats();
      EXPECT_GT(st.preemptions, 0);
      EXPECT_GT(st.spec.drafted, 0);
      EXPECT_EQ(st.kv_blocks_used, 0);
    }
  }
}

// Requests under a grammar draft too: their drafts follow the grammar (draft model) or are rejected where
// it does not allow them (n-gram), and the output is the plain engine's.
TEST_F(EngineSpeculative, GreedyOutputUnderAGrammarIsThePlainEngines) {
  const test::PairGrammar grammar;
  ASSERT_TRUE(grammar.constraint);
  std::vector<Request> requests;
  for (const auto& p : random_prompts(24)) {
    Request r = make_request(p, 60);
    r.sampling.grammar = grammar.constraint;
    r.stop_tokens = {0};
    requests.push_back(r);
  }
  const auto expected = plain(requests);
  for (const auto& choices : expected) EXPECT_TRUE(test::PairGrammar::matches(grammar.text(choices[0]))) << grammar.text(choices[0]);
  for (const Model* draft : {static_cast<const Model*>(pair_.draft.get()), static_cast<const Model*>(nullptr)}) {
    SCOPED_TRACE(draft ? "draft model" : "n-gram");
    EngineConfig config = engine_config(512, 16, 16);
    config.spec.draft_max = 4;
    config.spec.ngram = draft ? 0 : 2;
    Engine engine(*pair_.target, pool_, config, draft);
    const auto got = run(engine, requests, 8);
    for (size_t i = 0; i < requests.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "prompt " << i;
    EXPECT_GT(engine.stats().spec.drafted, 0);
    EXPECT_GT(engine.stats().spec.accepted, 0);
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  }
}

TEST_F(EngineSpeculative, SpeculationStopsPastMaxBatch) {
  std::vector<Request> requests;
  for (const auto& p : random_prompts(8)) requests.push_back(make_request(p, 24));
  const auto expected = plain(requests);
  for (int32_t max_batch : {4, 8}) {
    EngineConfig config = engine_config(512, 16, max_batch);
    config.spec.draft_max = 4;
    config.spec.adaptive = false;
    Engine engine(*pair_.target, pool_, config, pair_.draft.get());
    // All eight decode in step (one prefill step, then 24 tokens each, all draft-free at max_batch 4).
    EXPECT_EQ(run(engine, requests, 8), expected);
    if (max_batch == 4) {
      EXPECT_EQ(engine.stats().spec.drafted, 0);
    } else {
      EXPECT_GT(engine.stats().spec.drafted, 0);
    }
  }
}

// The controller picks the mode that measured cheaper per token at each batch size, measures both first,
// and now and then tries the other again.
TEST(SpeculationController, ChoosesTheCheaperModePerBatchSize) {
  SpeculationController c(8, true, 10);
  EXPECT_FALSE(c.speculate(9));  // past max_batch
  EXPECT_FALSE(c.speculate(0));
  // Batch 1: speculation costs 10 ms per token, plain 20 ms; batch 8: the other way round.
  const auto step = [&](int32_t n) {
    const bool spec = c.speculate(n);
    const bool spec_cheap = n == 1;
    c.record(n, spec, (spec == spec_cheap ? 0.010 : 0.020) * 4, 4);
    return spec;
  };
  int spec1 = 0, spec8 = 0;
  for (int i = 0; i < 100; ++i) spec1 += step(1), spec8 += step(8);
  EXPECT_GE(spec1, 85);
  EXPECT_LE(spec1, 97);  // it explored plain steps too
  EXPECT_LE(spec8, 15);
  EXPECT_GE(spec8, 3);
  EXPECT_NEAR(c.seconds_per_token(1, true), 0.010, 1e-9);
  EXPECT_NEAR(c.seconds_per_token(8, false), 0.010, 1e-9);
  // Drift: once speculation at batch 1 turns expensive, the explorations find it out... and plain wins.
  for (int i = 0; i < 400; ++i) {
    const bool spec = c.speculate(1);
    c.record(1, spec, spec ? 0.05 : 0.02, 1);
  }
  int spec_late = 0;
  for (int i = 0; i < 50; ++i) {
    const bool spec = c.speculate(1);
    spec_late += spec;
    c.record(1, spec, spec ? 0.05 : 0.02, 1);
  }
  EXPECT_LE(spec_late, 6);
  SpeculationController always(4, false);
  EXPECT_TRUE(always.speculate(4));
  EXPECT_FALSE(always.speculate(5));
}

// Where plain steps stay cheaper, each try of speculation that confirms it doubles the wait before the
// next; a try lasts until one of its steps is recorded (the first speculative step after plain ones is the
// draft model catching up, which the engine does not record), and a try that overturns the choice resets
// the wait.
TEST(SpeculationController, TriesTheOtherModeLessOftenWhileItKeepsLosing) {
  SpeculationController c(8, true, 10);
  std::vector<int> tries;  // the steps at which a speculative try began
  bool last_spec = false;
  for (int i = 0; i < 3000; ++i) {
    const bool spec = c.speculate(8);
    if (i >= 6 && spec && !last_spec) tries.push_back(i);  // past the warmup's alternation
    // A speculative step right after a plain one catches the draft up: not recorded.
    if (!(spec && !last_spec)) c.record(8, spec, spec ? 0.08 : 0.04, 4);
    last_spec = spec;
  }
  ASSERT_GE(tries.size(), 4u);
  for (size_t i = 2; i < tries.size(); ++i)
    EXPECT_GE(tries[i] - tries[i - 1], std::min(2 * (tries[i - 1] - tries[i - 2]) - 4, SpeculationController::kMaxExploreInterval))
        << "try " << i;
  EXPECT_LE(tries.size(), 12u);  // 3000 steps: 10, 20, 40, ..., then every 1024
  EXPECT_NEAR(c.seconds_per_token(8, true), 0.02, 1e-9);  // the tries were measured, past their catch-up

  // Speculation turns cheaper: the next try finds it out and stays.
  int spec_steps = 0;
  for (int i = 0; i < 4000; ++i) {
    const bool spec = c.speculate(8);
    spec_steps += i >= 3000 && spec;
    if (!(spec && !last_spec)) c.record(8, spec, spec ? 0.02 : 0.04, 4);
    last_spec = spec;
  }
  EXPECT_GE(spec_steps, 950);
}

TEST_F(EngineSpeculative, LogprobsAreThePlainEngines) {
  Request r = make_request(random_prompts(1)[0], 20);
  r.top_logprobs = 3;
  const auto collect = [&](const Model* draft) {
    EngineConfig config = engine_config(64, 16, 16);
    config.spec.draft_max = 4;
    Engine engine(*pair_.target, pool_, config, draft);
    std::vector<GeneratedToken> tokens;
    EXPECT_TRUE(engine.add_request(r).ok());
    while (engine.has_work())
      for (StepOutput& o : engine.step()) tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
    return tokens;
  };
  const auto a = collect(nullptr), b = collect(pair_.draft.get());
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token);
    EXPECT_FLOAT_EQ(a[i].logprob, b[i].logprob);
    ASSERT_EQ(a[i].top.size(), 3u);
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(a[i].top[j].token, b[i].top[j].token);
  }
}

// Many concurrent sampled requests with a poor drafter (most drafts rejected): each generated position's
// token distribution equals the plain engine's (two-sample chi-square).
TEST_F(EngineSpeculative, SampledTokensFollowThePlainEnginesDistribution) {
  const std::vector<int32_t> prompt{1, 50, 60, 70};
  const auto sample = [&](const Model* draft, uint64_t seed_base) {
    EngineConfig config = engine_config(1024, 16, 16);
    config.spec.draft_max = 3;
    config.prefix_caching = true;
    Engine engine(*pair_.target, pool_, config, draft);
    std::vector<Request> requests;
    for (int i = 0; i < 20000; ++i) {
      Request r = make_request(prompt, 4);
      r.sampling = test::top_p_sampling(1.0f, 0.9f);
      r.sampling.seed = seed_base + static_cast<uint64_t>(i);
      requests.push_back(r);
    }
    std::vector<std::map<int32_t, int>> counts(3);  // [position 2..4][token]
    for (const auto& choices : run(engine, requests, 16))
      for (size_t i = 0; i < 3; ++i) ++counts[i][choices[0].at(i + 1)];
    if (draft) {
      EXPECT_GT(engine.stats().spec.drafted - engine.stats().spec.accepted, 2000);  // rejections happened
      EXPECT_GT(engine.stats().spec.accepted, 0);
    }
    return counts;
  };
  const auto with_spec = sample(pair_.poor_draft.get(), 0), without = sample(nullptr, 1u << 20);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_GT(test::same_distribution_p_value(with_spec[i], without[i]), 0.001) << "token " << i + 2;
}

}  // namespace
}  // namespace kestrel
