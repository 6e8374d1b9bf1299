// libFuzzer target: any byte string read as GBNF text (up to a NUL byte) must parse or fail with a
// message; a grammar that parses is then fed the bytes after the NUL and masks a small vocabulary, which
// must agree with checking each token alone. The text is also read as a JSON Schema pattern: it converts
// to an expression that parses as GBNF, or fails with a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "sample/grammar_matcher.h"
#include "sample/regex_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view feed = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1, 64);
  if (auto pattern = kestrel::regex_to_grammar(text); pattern.ok()) {
    auto pg = kestrel::parse_grammar("root ::= " + *pattern + "\nchar ::= [^\"\\\\]\n");
    if (!pg.ok() && pg.error().find("nest") == std::string::npos) std::abort();  // (deep groups are refused)
  } else if (pattern.error().empty()) {
    std::abort();
  }
  auto g = kestrel::parse_grammar(text);
  if (!g.ok()) {
    if (g.error().empty()) std::abort();
    return 0;
  }
  static const std::vector<std::string> pieces = {"", "a", "b", "ab", "{", "}", "\"", " ", "0", "12", "\xC3", "\xA9",
                                                  "\xC3\xA9", "x\n", "[", "]", ",", ":", "\\", "-"};
  static const auto trie = std::make_shared<const kestrel::TokenTrie>(pieces);
  kestrel::GrammarConstraint c(std::move(g).value(), trie, {0});
  kestrel::GrammarState s = c.start();
  for (size_t i = 0; i <= feed.size() && !s.dead(); ++i) {
    float logits[20] = {};
    c.mask(s, logits, 20);
    for (int32_t t = 0; t < 20; ++t)
      if ((logits[t] == 0.0f) != c.allows(s, t)) std::abort();
    if (i < feed.size()) s = kestrel::grammar_advance_byte(c.grammar(), s, static_cast<uint8_t>(feed[i]));
  }
  return 0;
}
