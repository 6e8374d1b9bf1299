// A context-free grammar over Unicode code points, parsed from GBNF text (llama.cpp's grammar format):
//
//   root   ::= object                       # a rule: name ::= alternatives
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   digit  ::= [0-9]                        # character classes, ranges, [^...] negation, . any
//   num    ::= "-"? digit+ ( "." digit{1,6} )?   # * + ? {m} {m,} {m,n} repetition, ( ) groups
//
// Strings and classes take escapes \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH. A rule's alternatives may
// continue on later lines; a rule ends where the next `name ::=` starts. Comments run from # to the line's end.
//
// Compiled form: every alternative of every rule is a run of elements in one flat array, ended by an End
// element; groups and repetitions become rules of their own (X* is R ::= X R | ε, so a matcher that drops
// finished continuations needs no stack for it). A position in the array is what a matcher's stack holds.
//
// Contract: parse_grammar checks every reference resolves, the root exists, and no rule can reach itself
// without consuming a character (left recursion), so expanding a stack always terminates.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kestrel {

struct GrammarElement {
  enum class Kind : uint8_t { End, RuleRef, Chars };
  Kind kind = Kind::End;
  bool negated = false;    // Chars: matches code points outside the ranges
  int32_t rule = -1;       // RuleRef: the rule
  int32_t first_range = 0; // Chars: its ranges are ranges[first_range, first_range + n_ranges)
  int32_t n_ranges = 0;
};

struct CodePointRange {
  uint32_t lo = 0, hi = 0;  // inclusive
};

struct Grammar {
  std::vector<GrammarElement> elements;         // every alternative's elements, each run ended by End
  std::vector<CodePointRange> ranges;           // the Chars elements' ranges
  std::vector<std::vector<int32_t>> rule_alts;  // [n_rules] the positions where each alternative starts
  std::vector<std::string> rule_names;          // [n_rules] (generated rules: "parent_N")
  int32_t root = 0;

  // Whether the Chars element at `position` matches code point c.
  bool matches(int32_t position, uint32_t c) const;
  // Whether it matches any code point in [lo, hi] (a partly received UTF-8 sequence).
  bool matches_any(int32_t position, uint32_t lo, uint32_t hi) const;
};

// Error with the line, column and what was expected for text that is not GBNF, an undefined rule, a
// missing root rule, or left recursion.
Result<Grammar> parse_grammar(std::string_view text, std::string_view root = "root");

}  // namespace kestrel
