// Tokenizer behaviour beyond the reference vectors: special tokens, BOS/EOS, streaming detokenization.
#include <random>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "io/gguf.h"
#include "test_support.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

Tokenizer load(const std::string& shared, const std::string& name) {
  auto f = GgufFile::open(shared + "/tokenizer-tests/ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(f.ok());
  auto t = Tokenizer::from_gguf(f.value());
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

TEST(Tokenizer, BosAndSpecialTokenParsing) {
  KESTREL_REQUIRE_SHARED(shared);
  const Tokenizer t = load(shared, "llama-spm");
  const auto plain = t.encode("Hello", false);
  const auto with_bos = t.encode("Hello", true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  // "</s>" is a control token: parsed only when asked.
  const auto parsed = t.encode("Hi</s>", false, true);
  EXPECT_EQ(parsed.back(), 2);
  const auto literal = t.encode("Hi</s>", false, false);
  EXPECT_NE(literal.back(), 2);
  EXPECT_GT(literal.size(), parsed.size());
  EXPECT_EQ(t.decode(t.encode("Hello world", true)), "Hello world");
}

TEST(Tokenizer, ByteFallbackRoundTrips) {
  KESTREL_REQUIRE_SHARED(shared);
  const Tokenizer t = load(shared, "llama-spm");
  const std::string text = "emoji \xF0\x9F\xA6\x85 and \xE2\x82\xAC";
  EXPECT_EQ(t.decode(t.encode(text, false)), text);
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  KESTREL_REQUIRE_SHARED(shared);
  const Tokenizer t = load(shared, "llama-spm");
  // An emoji SentencePiece has no piece for: four byte tokens.
  const std::string text = "a\xF0\x9F\xA6\x85" "b";
  const auto ids = t.encode(text, false);
  StreamDecoder decoder(t, true);
  std::string out;
  for (int32_t id : ids) {
    const std::string chunk = decoder.push(id);
    std::string copy = chunk;
    EXPECT_EQ(utf8::take_well_formed(copy, true), chunk) << "partial or ill-formed UTF-8 emitted";
    out += chunk;
  }
  out += decoder.flush();
  EXPECT_EQ(out, text);
}

TEST(Utf8, TakesWellFormedText) {
  const auto take = [](std::string s, bool final, std::string* left = nullptr) {
    std::string out = utf8::take_well_formed(s, final);
    if (left) *left = s;
    return out;
  };
  std::string left;
  EXPECT_EQ(take("abc", false), "abc");
  EXPECT_EQ(take("ab\xE2\x82", false, &left), "ab");
  EXPECT_EQ(left, "\xE2\x82");
  EXPECT_EQ(take("ab\xE2\x82\xAC", false), "ab\xE2\x82\xAC");
  EXPECT_EQ(take("\xF0\x9F", true), "\xEF\xBF\xBD");  // incomplete at the end: one U+FFFD
  EXPECT_EQ(take("\xF0" "a", false), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(take("\xC3\xE2\x82\xAC", false), "\xEF\xBF\xBD\xE2\x82\xAC");  // a lead byte cut short
  EXPECT_EQ(take("\xED\xA0\x80", false), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(take("\xC0\xAF", false), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
}

// The old decoder emitted "\xC3\xE2\x82" as soon as it had three bytes, so a stream split there serialised
// differently from the whole text. Now any split of any bytes gives the same well-formed text.
TEST(Utf8, SplitsDoNotChangeTheText) {
  std::mt19937 rng(7);
  const unsigned char alphabet[] = {'a', 0x80, 0x9F, 0xAC, 0xBF, 0xC3, 0xE2, 0x82, 0xED, 0xF0, 0x9F, 0xF4, 0x90};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) bytes += static_cast<char>(alphabet[rng() % sizeof alphabet]);
    std::string whole = bytes;
    const std::string expected = utf8::take_well_formed(whole, true);
    std::string pending, streamed;
    for (char c : bytes) {
      pending += c;
      if (rng() % 2) streamed += utf8::take_well_formed(pending, false);
    }
    streamed += utf8::take_well_formed(pending, true);
    ASSERT_EQ(streamed, expected);
    const auto j = nlohmann::json(streamed).dump();  // well-formed: serialises without an error handler
    EXPECT_FALSE(j.empty());
  }
}

TEST(Utf8, WellFormedIsWhatPassesUnchanged) {
  EXPECT_TRUE(utf8::well_formed(""));
  EXPECT_TRUE(utf8::well_formed("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"));
  for (const char* bad : {"\x80", "\xC0\xAF", "\xC3", "\xE2\x82", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF"})
    EXPECT_FALSE(utf8::well_formed(bad)) << ::testing::PrintToString(std::string(bad));
  // Random bytes: well-formed exactly when the decoder takes them as they are.
  std::mt19937 rng(11);
  const unsigned char alphabet[] = {'a', 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC2, 0xC3, 0xE0, 0xE2, 0xED, 0xF0, 0xF4, 0xF5};
  int well_formed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) bytes += static_cast<char>(alphabet[rng() % sizeof alphabet]);
    std::string taken = bytes;
    const bool unchanged = utf8::take_well_formed(taken, true) == bytes;
    ASSERT_EQ(utf8::well_formed(bytes), unchanged) << trial;
    well_formed += unchanged;
  }
  EXPECT_GT(well_formed, 1000);  // both outcomes exercised
}

TEST(Tokenizer, UnknownModelTypeIsAnError) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "klingon");
  const auto bytes = w.serialize([](size_t, std::vector<uint8_t>&) {});
  auto f = GgufFile::parse(MappedFile::from_memory(bytes.data(), bytes.size()));
  ASSERT_TRUE(f.ok());
  auto t = Tokenizer::from_gguf(f.value());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().find("klingon"), std::string::npos);
}

TEST(Tokenizer, InvalidUtf8InputDoesNotCrash) {
  KESTREL_REQUIRE_SHARED(shared);
  for (const char* name : {"llama-spm", "gpt-2", "deepseek-llm"}) {
    const Tokenizer t = load(shared, name);
    const std::string bad = "ok \xFF\xFE \xC3 broken \xE2\x82";
    const auto ids = t.encode(bad, false);
    EXPECT_FALSE(ids.empty()) << name;
    for (int32_t id : ids) EXPECT_LT(id, t.vocab().n_tokens());
  }
}

}  // namespace
}  // namespace kestrel
