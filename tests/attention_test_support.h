// Checking the paged attention kernels against references on every ISA this machine runs.
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

#include "compute/cpu/attention.h"
#include "compute/cpu/isa.h"
#include "core/thread_pool.h"

namespace kestrel::test {

// Outputs a kernel must come within `tolerance` of, element by element.
struct AttentionExpectation {
  const std::vector<float>& values;  // [n_tok][n_heads][dv]
  float tolerance;
};

// Runs attention_paged_on for q [n_tok][n_heads][d] (n_tok = rows.positions.size()) on every runnable ISA
// and asserts each output element against every expectation.
inline void expect_attention_on_every_isa(ThreadPool& pool, const std::vector<float>& q, const KvLayerView& kv,
                                          const AttentionRows& rows, int n_heads, float scale,
                                          std::initializer_list<AttentionExpectation> expected) {
  const int n_tok = static_cast<int>(rows.positions.size());
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> got(expected.begin()->values.size());
    attention_paged_on(isa, pool, q.data(), kv, rows, got.data(), n_tok, n_heads, scale);
    for (const AttentionExpectation& e : expected)
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], e.values[i], e.tolerance) << i;
  }
}

}  // namespace kestrel::test
