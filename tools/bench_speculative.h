// The speculative-decoding rows of `kestrel bench` (see bench_speculative.cpp).
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/speculative_generator.h"
#include "model/model.h"

namespace kestrel::cli {

struct SpecBenchArgs {
  SpeculativeConfig spec;
  std::string prompt = "Once upon a time";  // tokenized with the target's vocabulary
  std::string label;                        // the drafter, for the table
  int n_gen = 128;
  int repetitions = 3;
  int block_size = 16;
  KvTypes kv_types = KvType::F16;
};

struct SpecBenchResult {
  int n_prompt = 0;
  std::vector<double> plain_ts, spec_ts;  // [repetitions] tok/s without and with speculation
  double acceptance = 0;                  // accepted / drafted
  double tokens_per_forward = 0;          // generated tokens / target forwards (the prompt's included)
};

// Error when a generation fails or the speculative output differs from the plain one.
Result<SpecBenchResult> bench_speculative(const Model& target, const Model* draft, ThreadPool& pool, const SpecBenchArgs& a);

}  // namespace kestrel::cli
