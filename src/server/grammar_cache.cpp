#include "server/grammar_cache.h"

namespace kestrel {

std::shared_ptr<const TokenTrie> token_trie(const Tokenizer& tokenizer) {
  const auto n_vocab = static_cast<int32_t>(tokenizer.vocab().tokens.size());
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));  // [n_vocab]
  for (int32_t t = 0; t < n_vocab; ++t) pieces[static_cast<size_t>(t)] = tokenizer.token_to_piece(t);
  return std::make_shared<const TokenTrie>(pieces);
}

GrammarCache::GrammarCache(const Tokenizer& tokenizer, size_t capacity)
    : trie_(token_trie(tokenizer)), capacity_(std::max<size_t>(capacity, 1)) {
  for (int32_t id : {tokenizer.vocab().eos, tokenizer.vocab().eot})
    if (id >= 0) end_tokens_.push_back(id);
}

Result<std::shared_ptr<const GrammarConstraint>> GrammarCache::get(const std::string& gbnf) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it)
      if (it->first == gbnf) {
        recent_.splice(recent_.begin(), recent_, it);
        return recent_.front().second;
      }
  }
  auto grammar = parse_grammar(gbnf);
  if (!grammar.ok()) return Error{grammar.error()};
  auto constraint = std::make_shared<const GrammarConstraint>(std::move(grammar).value(), trie_, end_tokens_);
  std::lock_guard<std::mutex> lock(mutex_);
  recent_.emplace_front(gbnf, constraint);
  if (recent_.size() > capacity_) recent_.pop_back();
  return std::shared_ptr<const GrammarConstraint>(constraint);
}

}  // namespace kestrel
