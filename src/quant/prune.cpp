#include "quant/prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kestrel {
namespace {

// The score of w[i] (input channel i % n_in): what removing it costs.
inline float score(const float* w, size_t i, int64_t n_in, const float* input_norm) {
  const float m = std::fabs(w[i]);
  return input_norm ? m * input_norm[i % static_cast<size_t>(n_in)] : m;
}

// Zeroes the n_prune lowest-scoring of w[0, n) (ties: the earlier input first, so the result is
// deterministic). order: scratch of n.
void prune_lowest(float* w, size_t n, size_t n_prune, int64_t n_in, const float* input_norm, std::vector<uint32_t>& order) {
  if (n_prune == 0) return;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0u);
  const auto lower = [&](uint32_t a, uint32_t b) {
    const float sa = score(w, a, n_in, input_norm), sb = score(w, b, n_in, input_norm);
    return sa < sb || (sa == sb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_prune - 1), order.end(), lower);
  for (size_t k = 0; k < n_prune; ++k) w[order[k]] = 0.0f;
}

}  // namespace

void prune_matrix(float* w, int64_t n_out, int64_t n_in, const PruneSpec& spec, const float* input_norm, ThreadPool& pool) {
  const float* norm = spec.method == PruneMethod::Wanda ? input_norm : nullptr;
  const size_t row = static_cast<size_t>(n_in);
  if (spec.pattern == PrunePattern::TwoFour) {
    pool.parallel_for(static_cast<size_t>(n_out), 16, [&](size_t begin, size_t end, int) {
      std::vector<uint32_t> order;
      for (size_t r = begin; r < end; ++r)
        for (size_t g = 0; g + 4 <= row; g += 4) {
          float* group = w + r * row + g;
          // the group's scores index its own inputs: offset the norm so input g + i reads norm[g + i]
          prune_lowest(group, 4, 2, 4, norm ? norm + g : nullptr, order);
        }
    });
    return;
  }
  const double sparsity = std::clamp(spec.sparsity, 0.0, 1.0);
  if (spec.method == PruneMethod::Wanda) {  // per output row
    const size_t n_prune = static_cast<size_t>(std::llround(sparsity * static_cast<double>(row)));
    pool.parallel_for(static_cast<size_t>(n_out), 8, [&](size_t begin, size_t end, int) {
      std::vector<uint32_t> order;
      for (size_t r = begin; r < end; ++r) prune_lowest(w + r * row, row, n_prune, n_in, norm, order);
    });
    return;
  }
  // magnitude: one threshold over the matrix
  const size_t n = row * static_cast<size_t>(n_out);
  const size_t n_prune = static_cast<size_t>(std::llround(sparsity * static_cast<double>(n)));
  std::vector<uint32_t> order;
  prune_lowest(w, n, n_prune, n_in, nullptr, order);
}

}  // namespace kestrel
