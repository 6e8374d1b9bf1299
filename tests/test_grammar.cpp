// The grammar engine: GBNF parsing (and its errors), the recognizer on texts it must accept and reject,
// UTF-8 split across tokens, the trie-walked token mask against checking every token alone, the sampler
// drawing only allowed tokens, and constrained generation on stories260K through the engine.
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "engine/engine.h"
#include "io/gguf.h"
#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "sample/grammar_matcher.h"
#include "sample/json_schema_grammar.h"
#include "sample/sampler.h"
#include "stories_model.h"
#include "test_support.h"
#include "tokenizer/stream_decoder.h"

namespace kestrel {
namespace {

Grammar parse_ok(const std::string& text) {
  auto g = parse_grammar(text);
  EXPECT_TRUE(g.ok()) << g.error();
  return g.ok() ? std::move(g).value() : Grammar{};
}

// Whether the whole text is a sentence of the grammar.
bool accepts(const Grammar& g, const std::string& text) { return grammar_complete(grammar_advance(g, grammar_start(g), text)); }
// Whether the text can be continued into a sentence.
bool viable(const Grammar& g, const std::string& text) { return !grammar_advance(g, grammar_start(g), text).dead(); }

TEST(Grammar, ParseErrorsNameTheLineAndWhatWasExpected) {
  struct Case { std::string text, message; };
  const std::vector<Case> cases = {
      {"", "expected a rule"},
      {"root ::= foo", "rule 'foo' is used but never defined"},
      {"start ::= \"a\"", "no rule named 'root'"},
      {"root ::= \"a\nroot2 ::= \"b", "'\"' to close the string"},
      {"root ::= [a-", "']' to close"},
      {"root ::= ( \"a\" ", "')' to close the group"},
      {"root ::= \"a\" \n  x ::= \"\\q\"", "line 2, column"},
      {"root ::= root \"a\" | \"b\"", "left-recursive"},
      {"root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"", "left-recursive"},
      {"root ::= \"a\"{3,2}", "maximum is not below"},
      {"root ::= \"a\"{99999}", "at most 4096"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root := \"a\"", "'::='"},
      {"root ::= [z-a]", "end is not below its start"},
      {"root ::= \"\\u00\"", "4 hex digits"},
  };
  for (const Case& c : cases) {
    auto g = parse_grammar(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.error().find(c.message), std::string::npos) << c.text << " -> " << g.error();
  }
  std::string deep = "root ::= ";
  for (int i = 0; i < 200; ++i) deep += "(";
  auto g = parse_grammar(deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().find("nested parentheses"), std::string::npos) << g.error();
}

TEST(Grammar, RecognisesExactlyItsLanguage) {
  const Grammar g = parse_ok(R"(
    # a comment
    root  ::= "id:" digit+ suffix? ( "," word )*
    digit ::= [0-9]
    suffix ::= "x" | "y"
      | "zz"              # alternatives continue on the next line
    word  ::= [a-c]{2,3}
  )");
  for (const char* s : {"id:1", "id:42x", "id:7zz", "id:0,ab", "id:3y,abc,bb"}) EXPECT_TRUE(accepts(g, s)) << s;
  for (const char* s : {"id:", "id:x", "id:1z", "id:1,a", "id:1,abcd", "id:1,ad", "id1", " id:1"})
    EXPECT_FALSE(accepts(g, s)) << s;
  EXPECT_TRUE(viable(g, "id:1z"));    // "zz" may still come
  EXPECT_FALSE(viable(g, "id:1,abcd"));
  EXPECT_TRUE(viable(g, "id:12,a"));
}

TEST(Grammar, CharacterClassesEscapesAndAnyCharacter) {
  const Grammar g = parse_ok(R"(root ::= [^a-z\n] . "\x41\u00e9\"" [\]\-]? )");
  EXPECT_TRUE(accepts(g, "Q!A\xC3\xA9\""));
  EXPECT_TRUE(accepts(g, "9\xE2\x82\xAC" "A\xC3\xA9\"-"));  // "." matches a 3-byte character
  EXPECT_TRUE(accepts(g, "9aA\xC3\xA9\"]"));
  EXPECT_FALSE(accepts(g, "qaA\xC3\xA9\""));  // q is in a-z
  EXPECT_FALSE(accepts(g, "\naA\xC3\xA9\""));
  EXPECT_FALSE(accepts(g, "Q!A\xC3\xA8\""));
}

TEST(Grammar, Utf8SplitAcrossTokensIsHeldUntilComplete) {
  const Grammar g = parse_ok("root ::= [α-γ]+ \"!\"");  // U+03B1..U+03B3: CE B1..CE B3
  GrammarState s = grammar_advance(g, grammar_start(g), "\xCE");
  ASSERT_FALSE(s.dead());
  EXPECT_EQ(s.partial_left, 1);
  EXPECT_FALSE(grammar_complete(s));
  EXPECT_TRUE(grammar_advance(g, s, "\xB2!").stacks.size() > 0);
  EXPECT_TRUE(grammar_complete(grammar_advance(g, s, "\xB2!")));
  EXPECT_TRUE(grammar_advance(g, s, "\xB4").dead());   // U+03B4 is outside
  EXPECT_TRUE(grammar_advance(g, grammar_start(g), "\xCF").dead());  // no character starting CF is allowed
  EXPECT_TRUE(grammar_advance(g, grammar_start(g), "\x80").dead());  // a stray continuation byte
}

TEST(Grammar, JsonGrammarAcceptsJsonAndRejectsTheRest) {
  const Grammar g = parse_ok(json_grammar_text(false));
  const Grammar obj = parse_ok(json_grammar_text(true));
  const std::vector<std::string> good = {
      R"({})", R"([])", R"({"a": 1})", R"( {"a": [1, -2.5e3, true, false, null, "x\"y\u00e9"], "b": {}})",
      "[\n  {\"k\": \"v\"},\n  [0.5]\n]", R"({"unicode": "\u263A é €"})"};
  for (const std::string& s : good) {
    EXPECT_TRUE(accepts(g, s)) << s;
    EXPECT_FALSE(nlohmann::json::parse(s, nullptr, false).is_discarded()) << s;
  }
  EXPECT_TRUE(accepts(obj, R"({"a": 1})"));
  EXPECT_FALSE(accepts(obj, "[1]"));
  for (const char* s : {"{", R"({"a"})", R"({"a": 01})", R"({a: 1})", R"([1,])", R"({"a": tru})", "\"x\"", R"(["\x"])",
                        "{\"a\": \"line\nbreak\"}", R"([1 2])"})
    EXPECT_FALSE(accepts(g, s)) << s;
}

// A vocabulary with multi-byte characters split over tokens, punctuation runs and empty (control) tokens.
std::vector<std::string> test_vocab() {
  std::vector<std::string> v = {"", "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "{\"", "\":", "\",", "\"}", "true",
                                "false", "null", "tr", "ue", "0", "1", "12", "-", ".", "e", "5.", "a", "ab", "b\"",
                                "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "\\", "\\u", "00", "e9", "x", " \"",
                                "{}", "[]", "],", "},", "\"a\":", ": ", ", ", "nul", "l", "\t", "  ", "\xF0\x9F\x98\x80"};
  return v;
}

TEST(GrammarConstraint, TrieMaskEqualsCheckingEveryTokenAlone) {
  const std::vector<std::string> pieces = test_vocab();
  auto trie = std::make_shared<TokenTrie>(pieces);
  const int32_t eos = 0;
  GrammarConstraint c(parse_ok(json_grammar_text(false)), trie, {eos});
  std::mt19937 rng(7);
  int n_states = 0, n_complete = 0;
  for (int walk = 0; walk < 40; ++walk) {
    GrammarState s = c.start();
    for (int step = 0; step < 30; ++step, ++n_states) {
      std::vector<float> logits(pieces.size(), 0.0f);
      c.mask(s, logits.data(), static_cast<int32_t>(pieces.size()));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < static_cast<int32_t>(pieces.size()); ++t) {
        const bool masked_in = logits[static_cast<size_t>(t)] == 0.0f;
        ASSERT_EQ(masked_in, c.allows(s, t)) << "token " << t << " '" << pieces[static_cast<size_t>(t)] << "' at step " << step;
        if (masked_in) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "the grammar blocked every token before the text was complete";
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (t == eos) {
        ++n_complete;
        break;
      }
      s = c.advance(s, t);
      ASSERT_FALSE(s.dead());
    }
  }
  EXPECT_GT(n_complete, 0);
  EXPECT_GT(c.cached_masks(), 10u);
  EXPECT_GT(n_states, 100);
}

// Sampling under a grammar with every filter off: only the grammar narrows the choice.
SamplingParams unfiltered_sampling(float temperature, uint64_t seed, std::shared_ptr<GrammarConstraint> grammar) {
  SamplingParams p = test::top_p_sampling(temperature);
  p.seed = seed;
  p.grammar = std::move(grammar);
  return p;
}

TEST(GrammarConstraint, SamplerDrawsOnlyAllowedTokensAndFinishes) {
  const std::vector<std::string> pieces = {"", "a", "b", "ab", "c", "abc", "x"};
  auto trie = std::make_shared<TokenTrie>(pieces);
  auto constraint = std::make_shared<GrammarConstraint>(parse_ok("root ::= \"a\" \"b\"+ \"c\""), trie,
                                                        std::vector<int32_t>{0});
  for (float temperature : {0.0f, 1.0f}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      Sampler sampler(unfiltered_sampling(temperature, seed, constraint));
      std::string text;
      std::mt19937 rng(static_cast<uint32_t>(seed));
      for (int i = 0; i < 50 && !sampler.grammar_finished(); ++i) {
        std::vector<float> logits(pieces.size());
        for (float& l : logits) l = std::normal_distribution<float>(0, 2)(rng);
        logits[6] += 10;  // "x" would win unconstrained
        const int32_t t = sampler.sample(logits.data(), static_cast<int32_t>(logits.size()), {});
        ASSERT_GT(t, 0) << "never the end token before the text is complete, never blocked";
        sampler.accept(t);
        text += pieces[static_cast<size_t>(t)];
      }
      EXPECT_TRUE(sampler.grammar_finished()) << text;
      EXPECT_TRUE(std::regex_match(text, std::regex("ab+c"))) << text;
    }
  }
}

TEST(GrammarConstraint, DraftsWalkTheGrammarAheadOfTheAcceptedText) {
  // "c" has no token: once "a" is drawn, only "b" can follow and the text never completes.
  const std::vector<std::string> pieces = {"", "a", "b", "ab"};
  auto constraint = std::make_shared<GrammarConstraint>(parse_ok("root ::= \"a\" \"b\"* \"c\""),
                                                        std::make_shared<TokenTrie>(pieces), std::vector<int32_t>{0});
  Sampler sampler(unfiltered_sampling(1.0f, 0, constraint));
  const GrammarState start = sampler.grammar_state();
  GrammarState state = start;
  std::vector<TokenDistribution> dists;
  std::vector<float> logits = {5, 0, 0, 0};  // the end token would win unconstrained
  const int32_t first = sampler.draw_draft(logits.data(), 4, {}, state, dists);
  ASSERT_TRUE(first == 1 || first == 3) << first;
  ASSERT_EQ(dists.size(), 1u);
  EXPECT_EQ(dists[0].probability(0), 0.0);
  EXPECT_EQ(dists[0].probability(2), 0.0);
  EXPECT_TRUE(sampler.grammar_state() == start) << "the accepted text's state does not move";
  for (int i = 0; i < 5; ++i) {  // after "a" or "ab": only "b" (never "a", "ab" or the end)
    logits = {5, 5, 0, 5};
    EXPECT_EQ(sampler.draw_draft(logits.data(), 4, {}, state, dists), 2);
  }
  EXPECT_EQ(dists.size(), 6u);
  // "c" has no token: after "a" this grammar allows nothing, and a draft there changes nothing.
  auto strict_constraint = std::make_shared<GrammarConstraint>(
      parse_ok("root ::= \"a\" \"c\""), std::make_shared<TokenTrie>(pieces), std::vector<int32_t>{0});
  Sampler strict(unfiltered_sampling(1.0f, 0, strict_constraint));
  const GrammarState after_a = strict_constraint->advance(strict.grammar_state(), 1);
  GrammarState blocked = after_a;
  logits = {0, 0, 0, 0};
  EXPECT_EQ(strict.draw_draft(logits.data(), 4, {}, blocked, dists), -1);
  EXPECT_EQ(dists.size(), 6u);
  EXPECT_TRUE(blocked == after_a);
}

TEST(GrammarConstraint, EngineOutputFollowsTheGrammarOnStories) {
  const std::string shared = test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  test::load_stories(shared, model, tokenizer);
  if (HasFatalFailure()) return;
  const int32_t n_vocab = model->hparams().n_vocab;
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t t = 0; t < n_vocab; ++t) pieces[static_cast<size_t>(t)] = tokenizer->token_to_piece(t);
  auto trie = std::make_shared<TokenTrie>(pieces);
  const std::vector<int32_t> ends = {tokenizer->vocab().eos};
  // A record with bounded fields (always completes) and free JSON (completes or runs to the limit).
  const std::string record = R"(root ::= "{\"name\": \"" [A-Za-z ]{1,12} "\", \"age\": " [1-9] [0-9]? "}")";
  auto record_c = std::make_shared<GrammarConstraint>(parse_ok(record), trie, ends);
  auto json_c = std::make_shared<GrammarConstraint>(parse_ok(json_grammar_text(true)), trie, ends);

  ThreadPool pool(2);
  EngineConfig config;
  config.n_blocks = 256;
  Engine engine(*model, pool, config);
  std::map<int64_t, std::pair<bool, int>> kinds;  // request -> (json?, seed)
  const auto prompt = tokenizer->encode("Once upon a time, Lily wrote down her friend's name and age:", true);
  for (int seed = 0; seed < 8; ++seed) {
    for (bool json : {false, true}) {
      Request r;
      r.prompt = prompt;
      r.max_tokens = 200;
      r.sampling = unfiltered_sampling(1.0f, static_cast<uint64_t>(seed), json ? json_c : record_c);
      r.stop_tokens = ends;
      r.n = json ? 1 : 2;
      auto id = engine.add_request(r);
      ASSERT_TRUE(id.ok()) << id.error();
      kinds[id.value()] = {json, seed};
    }
  }
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> tokens;
  std::map<std::pair<int64_t, int32_t>, FinishReason> finish;
  for (int i = 0; i < 5000 && engine.has_work(); ++i)
    for (const StepOutput& o : engine.step()) {
      for (const GeneratedToken& t : o.tokens) tokens[{o.request_id, o.index}].push_back(t.token);
      if (o.finish != FinishReason::None) finish[{o.request_id, o.index}] = o.finish;
    }
  ASSERT_EQ(finish.size(), 8u * 2 + 8u);
  int n_json_complete = 0;
  for (const auto& [key, reason] : finish) {
    std::string text;
    for (int32_t t : tokens[key]) text += tokenizer->token_to_piece(t);
    const bool json = kinds[key.first].first;
    if (!json) {
      EXPECT_EQ(reason, FinishReason::Stop) << text;
      EXPECT_TRUE(std::regex_match(text, std::regex(R"(\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?\})"))) << text;
      continue;
    }
    if (reason == FinishReason::Stop) {
      ++n_json_complete;
      EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
      EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text;
    } else {
      EXPECT_EQ(reason, FinishReason::Length);
      EXPECT_TRUE(viable(json_c->grammar(), text)) << text;
    }
  }
  // A story model rarely closes a free JSON object within 200 tokens (its strings run on); every output was
  // either complete JSON or a prefix of it.
  RecordProperty("json_complete", n_json_complete);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The same agreement on a real 32k vocabulary (llama.cpp's llama-spm vocabulary from ../shared), at the
// states a JSON document passes through.
TEST(GrammarConstraint, TrieMaskEqualsCheckingEveryTokenOnARealVocabulary) {
  const std::string shared = test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
  auto file = GgufFile::open(shared + "/tokenizer-tests/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(file.ok()) << file.error();
  auto tokenizer = Tokenizer::from_gguf(file.value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const int32_t n_vocab = tokenizer->vocab().n_tokens();
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t t = 0; t < n_vocab; ++t) pieces[static_cast<size_t>(t)] = tokenizer->token_to_piece(t);
  GrammarConstraint c(parse_ok(json_grammar_text(true)), std::make_shared<TokenTrie>(pieces), {tokenizer->vocab().eos});
  const std::string doc = "{\"name\": \"Lily \\u00e9\u00e9\", \"n\": [1.5, -2e3, true, null, {\"k\": []}]}";
  GrammarState s = c.start();
  for (int32_t token : tokenizer->encode(doc, false)) {
    std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
    c.mask(s, logits.data(), n_vocab);
    int n_allowed = 0;
    for (int32_t t = 0; t < n_vocab; ++t) {
      const bool in = logits[static_cast<size_t>(t)] == 0.0f;
      n_allowed += in;
      ASSERT_EQ(in, c.allows(s, t)) << "token " << t << " '" << pieces[static_cast<size_t>(t)] << "' before '"
                                    << pieces[static_cast<size_t>(token)] << "'";
    }
    EXPECT_GT(n_allowed, 0);
    s = c.advance(s, token);
    ASSERT_FALSE(s.dead()) << "'" << pieces[static_cast<size_t>(token)] << "'";
  }
  EXPECT_TRUE(c.complete(s));
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// A grammar whose state differs after every distinct prefix (it remembers the path to close it in
// reverse) over a vocabulary of every a/c string up to 14 bytes: one mask would need more automaton states
// than the bound, so it walks on the states themselves; the mask is still exact and memory stays bounded.
TEST(GrammarConstraint, AGrammarWithTooManyStatesStillMasksExactly) {
  std::vector<std::string> pieces = {""};
  for (int len = 1; len <= 14; ++len)
    for (int bits = 0; bits < (1 << len); ++bits) {
      std::string s;
      for (int i = 0; i < len; ++i) s += (bits >> i) & 1 ? 'c' : 'a';
      pieces.push_back(s);
    }
  GrammarConstraint c(parse_ok("root ::= x\nx ::= \"a\" x \"b\" | \"c\" x \"d\" | \"\""), std::make_shared<TokenTrie>(pieces), {0});
  std::vector<float> logits(pieces.size(), 0.0f);
  c.mask(c.start(), logits.data(), static_cast<int32_t>(pieces.size()));
  EXPECT_LE(c.automaton_states(), 1u);  // dropped after the walk overflowed it
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    const auto t = static_cast<int32_t>(std::uniform_int_distribution<size_t>(1, pieces.size() - 1)(rng));
    EXPECT_EQ(logits[static_cast<size_t>(t)] == 0.0f, c.allows(c.start(), t)) << pieces[static_cast<size_t>(t)];
    EXPECT_EQ(logits[static_cast<size_t>(t)], 0.0f);  // every a/c string is a valid start
  }
  EXPECT_EQ(logits[0], 0.0f);  // empty is a sentence: the end token is allowed
}

}  // namespace
}  // namespace kestrel
