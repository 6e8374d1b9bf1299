#include "spec/ngram_drafter.h"

#include <algorithm>

namespace kestrel {

std::vector<int32_t> ngram_draft(std::span<const int32_t> tokens, int32_t n_max, int32_t k_max) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(n_max, len - 1); n >= 1 && k_max > 0; --n) {
    const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(len - n));
    // Latest occurrence first: start positions i < len - n whose n tokens equal the tail.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(len, from + k_max);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

}  // namespace kestrel
