// Tokenizer behaviour beyond the reference vectors: special tokens, BOS/EOS, streaming detokenization.
#include "io/gguf.h"
#include "test_support.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

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
    EXPECT_EQ(utf8::complete_prefix(chunk), chunk.size()) << "partial UTF-8 emitted";
    out += chunk;
  }
  out += decoder.flush();
  EXPECT_EQ(out, text);
}

TEST(Utf8, CompletePrefix) {
  EXPECT_EQ(utf8::complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8::complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8::complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8::complete_prefix("\xF0\x9F"), 0u);
  EXPECT_EQ(utf8::complete_prefix("\xF0" "a"), 2u);  // invalid: not held back
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
