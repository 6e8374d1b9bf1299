#include "sample/grammar_matcher.h"

#include <algorithm>
#include <cstring>

namespace kestrel {
namespace {

using Kind = GrammarElement::Kind;
using Stack = std::vector<int32_t>;

// Moves a stack to the point where it waits on characters (its last position a Chars element) or is
// finished (empty), branching at rule references; appends each result to out. Finished continuations
// are dropped on the way, so right recursion (X* as R ::= X R) never deepens a stack.
void expand(const Grammar& g, Stack stack, std::vector<Stack>& out) {
  while (!stack.empty()) {
    const int32_t pos = stack.back();
    const GrammarElement& e = g.elements[static_cast<size_t>(pos)];
    if (e.kind == Kind::End) {
      stack.pop_back();
      continue;
    }
    if (e.kind == Kind::Chars) break;
    // A reference: continue after it once the rule is matched, and branch into its alternatives.
    stack.back() = pos + 1;
    if (g.elements[static_cast<size_t>(pos + 1)].kind == Kind::End) stack.pop_back();
    const std::vector<int32_t>& alts = g.rule_alts[static_cast<size_t>(e.rule)];
    for (size_t i = 1; i < alts.size(); ++i) {
      Stack branch = stack;
      branch.push_back(alts[i]);
      expand(g, std::move(branch), out);
    }
    stack.push_back(alts[0]);
  }
  out.push_back(std::move(stack));
}

void normalise(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxGrammarStacks) stacks.resize(kMaxGrammarStacks);
}

// The stacks after code point c.
std::vector<Stack> accept(const Grammar& g, const std::vector<Stack>& stacks, uint32_t c) {
  std::vector<Stack> next;
  for (const Stack& s : stacks) {
    if (s.empty() || !g.matches(s.back(), c)) continue;
    Stack moved = s;
    ++moved.back();
    expand(g, std::move(moved), next);
  }
  normalise(next);
  return next;
}

}  // namespace

GrammarState grammar_start(const Grammar& g) {
  GrammarState s;
  for (int32_t alt : g.rule_alts[static_cast<size_t>(g.root)]) expand(g, {alt}, s.stacks);
  normalise(s.stacks);
  return s;
}

GrammarState grammar_advance_byte(const Grammar& g, const GrammarState& s, uint8_t byte) {
  GrammarState next;
  if (s.partial_left == 0) {
    if (byte < 0x80) {
      next.stacks = accept(g, s.stacks, byte);
      return next;
    }
    // A lead byte: 110xxxxx, 1110xxxx, 11110xxx.
    const int n = (byte >> 5) == 0x6 ? 1 : (byte >> 4) == 0xE ? 2 : (byte >> 3) == 0x1E ? 3 : 0;
    if (n == 0) return next;  // a continuation byte or an invalid one: dead
    next.partial = byte & (0x3Fu >> n);
    next.partial_left = static_cast<int8_t>(n);
    next.partial_size = static_cast<int8_t>(n + 1);
  } else {
    if ((byte & 0xC0) != 0x80) return next;
    next.partial = (s.partial << 6) | (byte & 0x3Fu);
    next.partial_left = static_cast<int8_t>(s.partial_left - 1);
    next.partial_size = s.partial_size;
  }
  // The code points this sequence can still encode: its prefix's range, within what its length may
  // encode (no over-long forms), never only surrogates.
  static constexpr uint32_t kFirst[5] = {0, 0, 0x80, 0x800, 0x10000}, kLast[5] = {0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
  const int shift = 6 * next.partial_left;
  const uint32_t lo = std::max(next.partial << shift, kFirst[next.partial_size]);
  const uint32_t hi = std::min(next.partial << shift | ((1u << shift) - 1), kLast[next.partial_size]);
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return GrammarState{};
  if (next.partial_left == 0) {
    next.stacks = accept(g, s.stacks, next.partial);
    next.partial = 0;
    next.partial_size = 0;
    return next;
  }
  // A character in part: keep the stacks that some completion of it could satisfy.
  for (const Stack& st : s.stacks)
    if (!st.empty() && g.matches_any(st.back(), lo, hi)) next.stacks.push_back(st);
  if (next.stacks.empty()) next = GrammarState{};
  return next;
}

GrammarState grammar_advance(const Grammar& g, const GrammarState& s, std::string_view bytes) {
  GrammarState state = s;
  for (char b : bytes) {
    state = grammar_advance_byte(g, state, static_cast<uint8_t>(b));
    if (state.dead()) break;
  }
  return state;
}

bool grammar_complete(const GrammarState& s) {
  return s.partial_left == 0 && !s.stacks.empty() && s.stacks.front().empty();  // sorted: the empty one first
}

bool grammar_can_continue(const GrammarState& s) {
  return std::any_of(s.stacks.begin(), s.stacks.end(), [](const Stack& st) { return !st.empty(); });
}

size_t GrammarStateHash::operator()(const GrammarState& s) const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the state's words
  auto put = [&](uint32_t v) { h = (h ^ v) * 0x100000001b3ull; };
  put(s.partial);
  put(static_cast<uint32_t>(static_cast<uint8_t>(s.partial_left)) |
      static_cast<uint32_t>(static_cast<uint8_t>(s.partial_size)) << 8);
  for (const Stack& st : s.stacks) {
    put(static_cast<uint32_t>(st.size()));
    for (int32_t p : st) put(static_cast<uint32_t>(p));
  }
  return static_cast<size_t>(h);
}

}  // namespace kestrel
