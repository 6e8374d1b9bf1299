// Prompt-lookup (n-gram) drafting: the tokens that followed the latest earlier occurrence of the
// sequence's last n tokens, trying n = n_max first and shorter n-grams after. No second model: repetitive
// text (code, quotes of the prompt, stories that repeat their phrases) drafts itself.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

// Up to k_max tokens continuing `tokens`, or none when no n-gram (n_max >= n >= 1) of its tail occurred
// before with a continuation.
std::vector<int32_t> ngram_draft(std::span<const int32_t> tokens, int32_t n_max, int32_t k_max);

}  // namespace kestrel
