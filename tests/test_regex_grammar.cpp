// JSON Schema patterns as grammars (sample/regex_grammar.h): over strings of characters a JSON string
// writes unescaped, the grammar accepts exactly what std::regex (ECMAScript) finds the pattern in; what
// it cannot express is refused by name.
#include <random>
#include <regex>

#include "sample/grammar.h"
#include "sample/grammar_matcher.h"
#include "sample/regex_grammar.h"
#include "test_support.h"

namespace kestrel {
namespace {

// The pattern's grammar with `char` (any JSON string character) defined, for the string's contents.
Grammar pattern_grammar(const std::string& pattern) {
  auto expr = regex_to_grammar(pattern);
  EXPECT_TRUE(expr.ok()) << pattern << ": " << (expr.ok() ? "" : expr.error());
  auto g = parse_grammar("root ::= " + (expr.ok() ? *expr : "\"\"") + "\nchar ::= [^\"\\\\\\x00-\\x1F]\n");
  EXPECT_TRUE(g.ok()) << pattern << " -> " << (expr.ok() ? *expr : "") << ": " << (g.ok() ? "" : g.error());
  return g.ok() ? std::move(g).value() : Grammar{};
}

TEST(RegexGrammar, AcceptsExactlyWhatTheRegexFinds) {
  const std::vector<std::string> patterns = {
      "^[a-z]+$",          "^\\d{3}-\\d{4}$",    "ab",                "^a|b$|^(c|d)$" /* refused below */, "^(ab|cd)*e?$",
      "^[A-Z][a-z]{0,3}$", "^\\w+@\\w+\\.com$",  "^[^ab]{2,}$",       "x.y",               "^(?:1|22)+$",
      "^\\S+ \\S+$",       "^[-+]?[0-9]+(\\.[0-9]+)?$",               "^[a-c]{2}\\d?$",    "b+$",               "^.{1,3}$",
      "^[\\w.-]+$",        ",()+0",              "^(a|)*b$",          "^(x?y?)+$",        "^(a(b|c)?)+$",       "^[0-9a-f]{2}(:[0-9a-f]{2}){1,2}$",
      "^a{05}$" /* five, not nullable */, "^(ab){2,}$", "^c{0}d$"};
  const std::string alphabet = "abcdex12-+.@ A:_f9Zom";
  std::mt19937 rng(5);
  for (const std::string& pattern : patterns) {
    if (pattern == "^a|b$|^(c|d)$") {
      EXPECT_FALSE(regex_to_grammar(pattern).ok());
      continue;
    }
    SCOPED_TRACE(pattern);
    const Grammar g = pattern_grammar(pattern);
    if (::testing::Test::HasFailure()) return;
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int i = 0; i < 4000; ++i) {
      std::string s;
      const int n = static_cast<int>(rng() % 9);
      for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_search(s, re);
      ASSERT_EQ(grammar_complete(grammar_advance(g, grammar_start(g), s)), want) << "'" << s << "'";
    }
    // Strings the regex matches are rare for some patterns: also walk the grammar itself.
    for (int i = 0; i < 200; ++i) {
      GrammarState st = grammar_start(g);
      std::string s;
      for (int step = 0; step < 40 && !(grammar_complete(st) && (rng() % 3 == 0 || !grammar_can_continue(st))); ++step) {
        std::vector<char> next;
        for (char c : alphabet)
          if (!grammar_advance_byte(g, st, static_cast<uint8_t>(c)).stacks.empty()) next.push_back(c);
        if (next.empty()) break;
        s += next[rng() % next.size()];
        st = grammar_advance_byte(g, st, static_cast<uint8_t>(s.back()));
      }
      if (grammar_complete(st)) {
        EXPECT_TRUE(std::regex_search(s, re)) << "'" << s << "'";
      }
    }
  }
}

TEST(RegexGrammar, NeverWritesWhatJsonEscapes) {
  const Grammar g = pattern_grammar("^.[^a]\\W\\s$");
  for (const char* bad : {"\"bc ", "a\\c ", "ab\n ", "a\tc "}) EXPECT_FALSE(grammar_complete(grammar_advance(g, grammar_start(g), bad))) << bad;
  EXPECT_TRUE(grammar_complete(grammar_advance(g, grammar_start(g), "xy! ")));
}

TEST(RegexGrammar, UnsupportedConstructsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "backreferences"},  {"a(?=b)", "lookaround"},      {"\\bword", "word boundaries"},
      {"\\p{L}", "property"},        {"a\\nb", "control"},          {"[a-", "unclosed '['"},
      {"(ab", "unclosed '('"},       {"ab)", "unbalanced"},        {"*a", "nothing before"},
      {"a**", "after a quantifier"}, {"a{x}", "not a quantifier"}, {"a^b", "anchors"},
      {"[z-a]", "out of order"},     {"\"", "escape"},           {"r\x8eot", "UTF-8"},
      {"\xC3", "UTF-8"},
  };
  for (const auto& [pattern, message] : cases) {
    auto r = regex_to_grammar(pattern);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_NE(r.error().find(message), std::string::npos) << pattern << " -> " << r.error();
  }
}

}  // namespace
}  // namespace kestrel
