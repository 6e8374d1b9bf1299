// Constrained decoding's cost per token: the grammar mask over a real 32k vocabulary (llama.cpp's
// ggml-vocab-llama-spm.gguf from ../shared) under the JSON grammar, computed afresh (a state not seen
// before: the trie walk) and from the cache (a state seen before), and one sampler step with and without
// the grammar. Skips without ../shared.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>

#include "io/gguf.h"
#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "sample/json_schema_grammar.h"
#include "sample/sampler.h"
#include "server/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::unique_ptr<Tokenizer> load_vocab() {
  const char* env = std::getenv("KESTREL_SHARED");
  const std::string shared = env ? env : "../shared";
  auto file = GgufFile::open(shared + "/tokenizer-tests/ggml-vocab-llama-spm.gguf");
  if (!file.ok()) return nullptr;
  auto t = Tokenizer::from_gguf(file.value());
  return t.ok() ? std::make_unique<Tokenizer>(std::move(t).value()) : nullptr;
}

const Tokenizer* vocab() {
  static std::unique_ptr<Tokenizer> t = load_vocab();
  return t.get();
}

// The JSON grammar's state after `prefix`.
struct JsonAt {
  std::shared_ptr<const GrammarConstraint> constraint;
  GrammarState state;
};
JsonAt json_at(const std::string& prefix) {
  auto c = GrammarCache(*vocab()).get(json_grammar_text(true));
  JsonAt j{std::move(c).value(), {}};
  j.state = grammar_advance(j.constraint->grammar(), j.constraint->start(), prefix);
  return j;
}

void BM_GrammarMaskFresh(benchmark::State& state, const char* prefix) {
  if (!vocab()) return state.SkipWithError("../shared not found (set KESTREL_SHARED)");
  const int32_t n_vocab = vocab()->vocab().n_tokens();
  std::vector<float> logits(static_cast<size_t>(n_vocab));  // [n_vocab]
  for (auto _ : state) {
    state.PauseTiming();
    JsonAt j = json_at(prefix);  // a new constraint: an empty cache
    state.ResumeTiming();
    j.constraint->mask(j.state, logits.data(), n_vocab);
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK_CAPTURE(BM_GrammarMaskFresh, object_start, "{")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GrammarMaskFresh, in_string, "{\"name\": \"Li")->Unit(benchmark::kMillisecond);

// Masks for every token of a JSON document as generation meets them, from a new constraint (nothing
// cached, no automaton): the per-token cost of a request's first structured answer.
void BM_GrammarDocument(benchmark::State& state) {
  if (!vocab()) return state.SkipWithError("../shared not found (set KESTREL_SHARED)");
  const int32_t n_vocab = vocab()->vocab().n_tokens();
  const std::string doc = R"({"name": "Lily", "age": 7, "friends": [{"name": "Tom", "pets": ["dog", "cat"]},
    {"name": "Sue", "scores": [1.5, -2, 3e4], "active": true, "note": null}], "city": "Paris \u00e9t\u00e9",
    "tags": {"a": {"b": {"c": [[1, 2], [3]]}}}, "text": "Once upon a time, there was a little girl."})";
  const std::vector<int32_t> tokens = vocab()->encode(doc, false);
  std::vector<float> logits(static_cast<size_t>(n_vocab));  // [n_vocab]
  for (auto _ : state) {
    state.PauseTiming();
    JsonAt j = json_at("");
    state.ResumeTiming();
    for (int32_t t : tokens) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      j.constraint->mask(j.state, logits.data(), n_vocab);
      if (logits[static_cast<size_t>(t)] != 0.0f) return state.SkipWithError("a token of the document was masked");
      j.state = j.constraint->advance(j.state, t);
    }
  }
  state.counters["tokens"] = static_cast<double>(tokens.size());
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GrammarDocument)->Unit(benchmark::kMillisecond);

void BM_GrammarMaskCached(benchmark::State& state) {
  if (!vocab()) return state.SkipWithError("../shared not found (set KESTREL_SHARED)");
  const int32_t n_vocab = vocab()->vocab().n_tokens();
  std::vector<float> logits(static_cast<size_t>(n_vocab));  // [n_vocab]
  JsonAt j = json_at("{\"name\": \"Li");
  j.constraint->mask(j.state, logits.data(), n_vocab);
  for (auto _ : state) {
    j.constraint->mask(j.state, logits.data(), n_vocab);
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_GrammarMaskCached)->Unit(benchmark::kMicrosecond);

// One token drawn at temperature 1 with top-k 40 from random logits, with the JSON grammar (at its
// start, cached after the first draw) and without.
void BM_SampleStep(benchmark::State& state) {
  if (!vocab()) return state.SkipWithError("../shared not found (set KESTREL_SHARED)");
  const int32_t n_vocab = vocab()->vocab().n_tokens();
  SamplingParams p;
  p.temperature = 1;
  if (state.range(0)) p.grammar = json_at("").constraint;
  Sampler sampler(p);
  std::mt19937 rng(1);
  std::vector<float> base(static_cast<size_t>(n_vocab)), logits;  // [n_vocab]
  for (float& l : base) l = std::normal_distribution<float>(0, 3)(rng);
  for (auto _ : state) {
    logits = base;
    benchmark::DoNotOptimize(sampler.sample(logits.data(), n_vocab, {}));
  }
}
BENCHMARK(BM_SampleStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kestrel
