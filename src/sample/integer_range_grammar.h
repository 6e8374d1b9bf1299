// Decimal integer ranges as GBNF: an expression that matches exactly the integers in [lo, hi] written as
// JSON writes them (no leading zeros, no "-0", no "+"), built digit position by digit position (the
// classic range-to-regular-expression construction), so JSON Schema's minimum / maximum (and their
// exclusive forms) constrain integers exactly.
#pragma once
#include <cstdint>
#include <string>

namespace kestrel {

// The widest integers the JSON grammar writes: 16 digits.
constexpr int64_t kMaxGrammarInteger = 9999999999999999;

// Requires -kMaxGrammarInteger <= lo <= hi <= kMaxGrammarInteger.
std::string integer_range_grammar(int64_t lo, int64_t hi);

}  // namespace kestrel
