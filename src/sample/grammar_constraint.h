// Constrained decoding: which tokens may come next under a grammar, as a logits mask.
//
// TokenTrie holds the vocabulary's bytes as a trie (built once per model and shared): tokens that share
// a prefix share the grammar work of that prefix, so a mask walks the trie once, carrying the grammar
// state down each branch and cutting a branch where the state dies.
//
// GrammarConstraint is one request's grammar over one vocabulary. Masks are cached by grammar state: text
// inside a JSON string, say, returns to the same state token after token, and its mask is computed once.
// A mask not cached yet walks the trie over a byte automaton built lazily from the grammar: each distinct
// state gets an id once and each (state, byte) transition is computed once, so the walk costs a table
// lookup per trie node (inside a string nearly every byte leads back to the same state).
// End tokens (the model's end-of-generation tokens) are allowed exactly when the text is a complete
// sentence, and are then the only tokens allowed if the grammar cannot continue.
//
// Contract: mask() and advance() may be called from several threads (the cache is locked); a state comes
// from start() or advance() of the same constraint.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sample/grammar.h"
#include "sample/grammar_matcher.h"

namespace kestrel {

class TokenTrie {
 public:
  // pieces: [n_vocab] each token's bytes; tokens with no bytes (control tokens) are never reachable.
  explicit TokenTrie(const std::vector<std::string>& pieces);
  int32_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }

  struct Node {
    int32_t first_child = 0, n_children = 0;  // children are nodes[first_child, first_child + n_children)
    int32_t first_token = 0, n_tokens = 0;    // tokens ending here: node_tokens[first_token, ...)
    uint8_t byte = 0;                          // the byte on the edge into this node
  };
  const std::vector<Node>& nodes() const { return nodes_; }   // [0] is the root
  const std::vector<int32_t>& node_tokens() const { return node_tokens_; }

 private:
  int32_t n_vocab_ = 0;
  std::vector<std::string> pieces_;   // [n_vocab]
  std::vector<Node> nodes_;           // breadth-first: a node's children are contiguous
  std::vector<int32_t> node_tokens_;  // tokens by node
};

class GrammarConstraint {
 public:
  GrammarConstraint(Grammar grammar, std::shared_ptr<const TokenTrie> vocab, std::vector<int32_t> end_tokens);

  GrammarState start() const;
  // logits: [n_vocab]. Sets every token that cannot continue the text to -infinity; end tokens are
  // allowed only when the text is complete.
  void mask(const GrammarState& state, float* logits, int32_t n_vocab) const;
  // Whether `token` may come next (the same rule as mask).
  bool allows(const GrammarState& state, int32_t token) const;
  // The state after `token` (an end token leaves it unchanged); dead if the token was not allowed.
  GrammarState advance(const GrammarState& state, int32_t token) const;
  bool complete(const GrammarState& state) const { return grammar_complete(state); }
  const Grammar& grammar() const { return grammar_; }
  size_t cached_masks() const;
  size_t automaton_states() const;

 private:
  // [ceil(n_vocab / 64)] a bit per token that the grammar allows after `state` (end tokens aside).
  std::shared_ptr<const std::vector<uint64_t>> allowed(const GrammarState& state) const;

  static constexpr int32_t kUnknown = -2;             // a transition not computed yet (-1: dead)
  // With at most kMaxGrammarStacks stacks per state, a hostile grammar holds ~100 MiB at most.
  static constexpr size_t kMaxAutomatonStates = 1 << 13;
  // The automaton's id of a state (-1 for a dead one), adding it if new. Caller holds mutex_.
  int32_t intern(GrammarState state) const;
  // The id of state `id` after one byte. Caller holds mutex_.
  int32_t step(int32_t id, uint8_t byte) const;

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<int32_t> end_tokens_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<GrammarState, std::shared_ptr<const std::vector<uint64_t>>, GrammarStateHash> cache_;
  mutable std::unordered_map<GrammarState, int32_t, GrammarStateHash> state_ids_;  // state -> automaton id
  mutable std::vector<GrammarState> states_;                    // [n_states]
  mutable std::vector<std::array<int32_t, 256>> transitions_;   // [n_states][byte] next id, -1 dead, kUnknown
  mutable std::vector<bool> continues_;                         // [n_states] some byte may follow
};

}  // namespace kestrel
