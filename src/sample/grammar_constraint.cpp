#include "sample/grammar_constraint.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kestrel {

TokenTrie::TokenTrie(const std::vector<std::string>& pieces)
    : n_vocab_(static_cast<int32_t>(pieces.size())), pieces_(pieces) {
  // Tokens sorted by bytes: each node's subtree is a contiguous run, so the trie builds breadth-first
  // from (node, run of tokens, depth) work items.
  std::vector<int32_t> order;  // [n_reachable] tokens with bytes, sorted by them
  for (int32_t t = 0; t < n_vocab_; ++t)
    if (!pieces_[static_cast<size_t>(t)].empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)];
  });
  struct Work { int32_t node; size_t begin, end, depth; };
  nodes_.push_back(Node{});
  std::vector<Work> queue = {{0, 0, order.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Work w = queue[q];
    size_t i = w.begin;
    Node& node = nodes_[static_cast<size_t>(w.node)];
    node.first_token = static_cast<int32_t>(node_tokens_.size());
    while (i < w.end && pieces_[static_cast<size_t>(order[i])].size() == w.depth) node_tokens_.push_back(order[i++]);
    node.n_tokens = static_cast<int32_t>(node_tokens_.size()) - node.first_token;
    node.first_child = static_cast<int32_t>(nodes_.size());
    while (i < w.end) {
      const auto byte = static_cast<uint8_t>(pieces_[static_cast<size_t>(order[i])][w.depth]);
      size_t j = i;
      while (j < w.end && static_cast<uint8_t>(pieces_[static_cast<size_t>(order[j])][w.depth]) == byte) ++j;
      Node child;
      child.byte = byte;
      queue.push_back({static_cast<int32_t>(nodes_.size()), i, j, w.depth + 1});
      nodes_.push_back(child);
      i = j;
    }
    nodes_[static_cast<size_t>(w.node)].n_children =
        static_cast<int32_t>(nodes_.size()) - nodes_[static_cast<size_t>(w.node)].first_child;
  }
}

GrammarConstraint::GrammarConstraint(Grammar grammar, std::shared_ptr<const TokenTrie> vocab,
                                     std::vector<int32_t> end_tokens)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), end_tokens_(std::move(end_tokens)) {}

GrammarState GrammarConstraint::start() const { return grammar_start(grammar_); }

size_t GrammarConstraint::automaton_states() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return states_.size();
}

size_t GrammarConstraint::cached_masks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

int32_t GrammarConstraint::intern(GrammarState state) const {
  if (state.dead()) return -1;
  auto [it, added] = state_ids_.emplace(state, static_cast<int32_t>(states_.size()));
  if (added) {
    continues_.push_back(state.partial_left > 0 || grammar_can_continue(state));
    states_.push_back(std::move(state));
    transitions_.emplace_back();
    transitions_.back().fill(kUnknown);
  }
  return it->second;
}

int32_t GrammarConstraint::step(int32_t id, uint8_t byte) const {
  int32_t& next = transitions_[static_cast<size_t>(id)][byte];
  if (next == kUnknown) {
    const int32_t computed = intern(grammar_advance_byte(grammar_, states_[static_cast<size_t>(id)], byte));
    transitions_[static_cast<size_t>(id)][byte] = computed;  // (intern may have moved the table)
    return computed;
  }
  return next;
}

std::shared_ptr<const std::vector<uint64_t>> GrammarConstraint::allowed(const GrammarState& state) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = cache_.find(state); it != cache_.end()) return it->second;
  if (states_.size() > kMaxAutomatonStates) {  // bounded memory for grammars with very many states
    state_ids_.clear();
    states_.clear();
    transitions_.clear();
    continues_.clear();
  }
  const TokenTrie& trie = *vocab_;
  auto bits = std::make_shared<std::vector<uint64_t>>((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
  const auto allow = [&](const TokenTrie::Node& node) {
    for (int32_t i = 0; i < node.n_tokens; ++i) {
      const int32_t t = trie.node_tokens()[static_cast<size_t>(node.first_token + i)];
      (*bits)[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    }
  };
  // Depth-first over the trie with the automaton state of each node's bytes; a token is allowed where
  // its node's state is alive (a character still in part counts: a later token may finish it).
  struct Frame { int32_t node, state; };
  std::vector<Frame> todo = {{0, intern(state)}};
  bool overflow = false;
  while (!todo.empty() && !overflow) {
    const Frame f = todo.back();
    todo.pop_back();
    const TokenTrie::Node& node = trie.nodes()[static_cast<size_t>(f.node)];
    allow(node);
    if (!continues_[static_cast<size_t>(f.state)]) continue;
    for (int32_t c = 0; c < node.n_children; ++c) {
      const int32_t child = node.first_child + c;
      const int32_t next = step(f.state, trie.nodes()[static_cast<size_t>(child)].byte);
      if (next >= 0) todo.push_back({child, next});
    }
    overflow = states_.size() > 2 * kMaxAutomatonStates;
  }
  if (overflow) {
    // A grammar whose states keep changing with every byte: walk with the states themselves, holding
    // only the current path's, and drop the automaton.
    state_ids_.clear();
    states_.clear();
    transitions_.clear();
    continues_.clear();
    std::fill(bits->begin(), bits->end(), 0);
    struct StateFrame { int32_t node; GrammarState state; };
    std::vector<StateFrame> path = {{0, state}};
    while (!path.empty()) {
      StateFrame f = std::move(path.back());
      path.pop_back();
      const TokenTrie::Node& node = trie.nodes()[static_cast<size_t>(f.node)];
      allow(node);
      if (f.state.partial_left == 0 && !grammar_can_continue(f.state)) continue;
      for (int32_t c = 0; c < node.n_children; ++c) {
        GrammarState next = grammar_advance_byte(grammar_, f.state, trie.nodes()[static_cast<size_t>(node.first_child + c)].byte);
        if (!next.dead()) path.push_back({node.first_child + c, std::move(next)});
      }
    }
  }
  if (cache_.size() >= 4096) cache_.clear();  // bounded memory for grammars with many states
  return cache_.emplace(state, std::move(bits)).first->second;
}

bool GrammarConstraint::allows(const GrammarState& state, int32_t token) const {
  if (std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end()) return grammar_complete(state);
  if (token < 0 || token >= vocab_->n_vocab() || vocab_->piece(token).empty()) return false;
  return !grammar_advance(grammar_, state, vocab_->piece(token)).dead();
}

void GrammarConstraint::mask(const GrammarState& state, float* logits, int32_t n_vocab) const {
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  std::vector<std::pair<int32_t, float>> ends;  // end tokens' logits, kept when the text is complete
  if (grammar_complete(state))
    for (int32_t t : end_tokens_)
      if (t >= 0 && t < n_vocab) ends.emplace_back(t, logits[t]);
  const auto bits = allowed(state);
  const int32_t n = std::min(n_vocab, vocab_->n_vocab());
  for (int32_t t = 0; t < n; ++t)
    if (!(((*bits)[static_cast<size_t>(t) / 64] >> (t % 64)) & 1)) logits[t] = kBanned;
  for (int32_t t = n; t < n_vocab; ++t) logits[t] = kBanned;
  for (int32_t t : end_tokens_)
    if (t >= 0 && t < n_vocab) logits[t] = kBanned;
  for (const auto& [t, logit] : ends) logits[t] = logit;
}

GrammarState GrammarConstraint::advance(const GrammarState& state, int32_t token) const {
  if (std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end()) return state;
  if (token < 0 || token >= vocab_->n_vocab()) return {};
  return grammar_advance(grammar_, state, vocab_->piece(token));
}

}  // namespace kestrel
