// Request grammars compiled over one model's vocabulary. The vocabulary's token trie is built once; the
// last few grammars are kept by their text, so a grammar that requests repeat (response_format
// json_object, an application's fixed GBNF) keeps its masks cached across requests.
//
// Contract: thread-safe (HTTP threads compile, the engine thread masks); the tokenizer outlives it.
#pragma once
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sample/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// Every token's bytes (control tokens: none) as a trie.
std::shared_ptr<const TokenTrie> token_trie(const Tokenizer& tokenizer);

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tokenizer, size_t capacity = 16);
  // The constraint for GBNF text (start rule "root"), or the parser's error.
  Result<std::shared_ptr<const GrammarConstraint>> get(const std::string& gbnf);

 private:
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_tokens_;  // end of generation: allowed once the text is complete
  size_t capacity_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const GrammarConstraint>>> recent_;  // most recent first
};

}  // namespace kestrel
