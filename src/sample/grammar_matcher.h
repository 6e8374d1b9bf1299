// Recognising a grammar's language one byte at a time (a pushdown recognizer over every parse at once).
//
// A stack holds grammar positions (sample/grammar.h), innermost last: the last is the Chars element to
// match next, the ones below are where each enclosing rule continues. A state holds every stack the text
// so far allows (deduplicated, sorted), plus the bytes of a UTF-8 character received only in part. An
// empty stack means the text so far is a complete sentence. A state with no stacks is dead: no
// continuation of the text is in the language.
//
// A very ambiguous grammar can keep many parses alive at once; past kMaxGrammarStacks the state keeps the
// first ones (in sorted order), so a hostile grammar costs bounded time per byte. What it then accepts
// is still in the language; it may only refuse some continuations it should allow.
//
// Contract: the Grammar passed to every call is the one the state was started from, and it outlives it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sample/grammar.h"

namespace kestrel {

constexpr size_t kMaxGrammarStacks = 256;

struct GrammarState {
  std::vector<std::vector<int32_t>> stacks;  // [n_stacks][depth] grammar positions, sorted, unique
  uint32_t partial = 0;      // bits of a UTF-8 character received in part
  int8_t partial_left = 0;   // its continuation bytes still to come (0: none pending)
  int8_t partial_size = 0;   // its length in bytes (2-4), which sets the code points it may encode

  bool dead() const { return stacks.empty(); }
  bool operator==(const GrammarState&) const = default;
};

// The state before any text: the root rule's alternatives, expanded.
GrammarState grammar_start(const Grammar& g);
// The state after one more byte; dead when the byte cannot continue the text. Invalid UTF-8 is dead too:
// stray continuation bytes, over-long forms (a byte-fallback vocabulary can spell "{" as F0 80 81 BB),
// surrogates and code points past U+10FFFF.
GrammarState grammar_advance_byte(const Grammar& g, const GrammarState& s, uint8_t byte);
// The state after a string of bytes (stops early once dead).
GrammarState grammar_advance(const Grammar& g, const GrammarState& s, std::string_view bytes);
// Whether the text so far is a whole sentence (no character pending).
bool grammar_complete(const GrammarState& s);
// Whether some code point can still follow (a stack waits on characters).
bool grammar_can_continue(const GrammarState& s);
// A hash of the whole state (cache keys; equal states hash equal).
struct GrammarStateHash {
  size_t operator()(const GrammarState& s) const;
};

}  // namespace kestrel
