// `kestrel bench` with -md / --spec-ngram: greedy generation of n tokens from a prompt, with and without
// speculation, alternating per repetition so a drift of a shared machine hits both.

#include "bench_speculative.h"
#include "core/timer.h"
#include "engine/speculative_generator.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
Result<SpecBenchResult> bench_speculative(const Model& target, const Model* draft, ThreadPool& pool, const SpecBenchArgs& a) {
  std::vector<int32_t> prompt{1};
  if (auto tok = Tokenizer::from_gguf(target.file()); tok.ok() && tok->has_vocab()) prompt = tok->encode(a.prompt, true, true);
  GeneratorConfig config;
  config.n_ctx = static_cast<int32_t>(prompt.size()) + a.n_gen + 1;
  config.block_size = a.block_size;
  config.kv_types = a.kv_types;
  Generator plain(target, pool, config);
  auto spec = SpeculativeGenerator::create(target, draft, pool, config, a.spec);
  if (!spec.ok()) return Error{spec.error()};
  SamplingParams greedy;
  greedy.temperature = 0;
  SpecBenchResult result;
  result.n_prompt = static_cast<int>(prompt.size());
  int64_t drafted = 0, accepted = 0, forwards = 0, generated = 0;
  std::vector<int32_t> plain_out, spec_out;
  for (int rep = 0; rep <= a.repetitions; ++rep) {  // rep 0 warms up
    Sampler s1(greedy), s2(greedy);
    plain_out.clear();
    spec_out.clear();
    plain.reset();
    Timer timer;
    auto p = plain.generate(prompt, a.n_gen, s1, {}, [&](int32_t t) { plain_out.push_back(t); return true; });
    const double plain_s = timer.elapsed_s();
    timer.reset();
    auto s = (*spec)->generate(prompt, a.n_gen, s2, {}, [&](int32_t t) { spec_out.push_back(t); return true; });
    const double spec_s = timer.elapsed_s();
    if (!p.ok()) return Error{p.error()};
    if (!s.ok()) return Error{s.error()};
    if (plain_out != spec_out) return Error{"the speculative output differs from the target's own (greedy)"};
    if (rep == 0) continue;
    result.plain_ts.push_back(static_cast<double>(plain_out.size()) / plain_s);
    result.spec_ts.push_back(static_cast<double>(spec_out.size()) / spec_s);
    drafted += (*spec)->stats().drafted;
    accepted += (*spec)->stats().accepted;
    forwards += (*spec)->target_forwards() + 1;  // and the prompt's, which gave the first token
    generated += static_cast<int64_t>(spec_out.size());
  }
  result.acceptance = drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  result.tokens_per_forward = forwards > 0 ? static_cast<double>(generated) / static_cast<double>(forwards) : 0.0;
  return result;
}

}  // namespace kestrel::cli
