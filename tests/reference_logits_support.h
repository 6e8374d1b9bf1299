// Reading and comparing logits files (../shared/reference/*.logits, and `kestrel logits` output, which has
// the same layout), with the tolerances of ../shared/reference/README.md. Shared by the reference-logit
// and tensor-parallel tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"

namespace kestrel::test {

struct ReferenceLogits {
  std::vector<int32_t> tokens;
  int32_t n_vocab = 0;
  std::vector<float> logits;  // [n_tokens, n_vocab]
};

inline ReferenceLogits read_reference(const std::string& path) {
  const std::string bytes = read_file(path);
  ReferenceLogits r;
  int32_t n = 0;
  std::memcpy(&n, bytes.data(), 4);
  std::memcpy(&r.n_vocab, bytes.data() + 4, 4);
  r.tokens.resize(static_cast<size_t>(n));
  std::memcpy(r.tokens.data(), bytes.data() + 8, 4 * r.tokens.size());
  r.logits.resize(static_cast<size_t>(n) * r.n_vocab);
  EXPECT_EQ(bytes.size(), 8 + 4 * r.tokens.size() + 4 * r.logits.size()) << path;
  std::memcpy(r.logits.data(), bytes.data() + 8 + 4 * r.tokens.size(), 4 * r.logits.size());
  return r;
}

// log-softmax of one row, in double.
inline std::vector<double> log_softmax(const float* x, int n) {
  double max = x[0];
  for (int i = 1; i < n; ++i) max = std::max<double>(max, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - max - std::log(sum);
  return out;
}

struct Comparison {
  double max_abs = 0;
  double mean_kl = 0;  // KL(reference || ours), averaged over rows
};

inline Comparison compare(const std::vector<float>& ref, const std::vector<float>& ours, int n_rows, int n_vocab) {
  Comparison c;
  for (int r = 0; r < n_rows; ++r) {
    const float* a = ref.data() + static_cast<size_t>(r) * n_vocab;
    const float* b = ours.data() + static_cast<size_t>(r) * n_vocab;
    const auto la = log_softmax(a, n_vocab), lb = log_softmax(b, n_vocab);
    double kl = 0;
    for (int i = 0; i < n_vocab; ++i) {
      c.max_abs = std::max(c.max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
      kl += std::exp(la[static_cast<size_t>(i)]) * (la[static_cast<size_t>(i)] - lb[static_cast<size_t>(i)]);
    }
    c.mean_kl += kl / n_rows;
  }
  return c;
}

// Tolerances from ../shared/reference/README.md, by the weight type of the model's matrices.
inline void expect_within_tolerance(const std::string& model, const Comparison& c, const std::string& what) {
  SCOPED_TRACE(model + " " + what);
  const bool quantized = model.find("q8_0") != std::string::npos || model.find("q4_0") != std::string::npos ||
                         model.find("q4_k") != std::string::npos || model.find("q6_k") != std::string::npos;
  const bool half = model.find("f16") != std::string::npos || model.find("bf16") != std::string::npos;
  if (quantized) {
    EXPECT_LE(c.mean_kl, 1e-3);
    EXPECT_LE(c.max_abs, 0.25);
  } else if (half) {
    EXPECT_LE(c.mean_kl, 1e-4);
  } else if (model.find("stories260K") != std::string::npos) {
    EXPECT_LE(c.max_abs, 1e-2);
  } else {
    EXPECT_LE(c.max_abs, 2e-3);
  }
  std::printf("    %-40s %-10s max|diff| %.3e  mean KL %.3e\n", model.c_str(), what.c_str(), c.max_abs, c.mean_kl);
}

}  // namespace kestrel::test
