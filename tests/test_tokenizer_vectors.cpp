// Every test text in ../shared/tokenizer-tests tokenizes to llama.cpp's ids (no BOS/EOS, special text not
// parsed), and decoding the expected ids gives back the text where the tokenizer is lossless.
#include <filesystem>
#include <sstream>

#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

std::vector<std::string> split_texts(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0, hit;
  while ((hit = inp.find(sep, pos)) != std::string::npos) {
    texts.push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  return texts;
}

std::vector<std::vector<int32_t>> read_expected(const std::string& out) {
  std::vector<std::vector<int32_t>> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    int32_t id;
    while (ids >> id) row.push_back(id);
    rows.push_back(row);
  }
  return rows;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, MatchesReferenceIds) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string base = shared + "/tokenizer-tests/ggml-vocab-" + GetParam() + ".gguf";
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file.ok()) << file.error();
  auto tokenizer = Tokenizer::from_gguf(file.value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const auto texts = split_texts(test::read_file(base + ".inp"));
  const auto expected = read_expected(test::read_file(base + ".out"));
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 10u);
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tokenizer->encode(texts[i], false, false);
    EXPECT_EQ(ids, expected[i]) << "text #" << i << ": '" << texts[i] << "'";
    mismatches += ids != expected[i];
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(TokenizerVectors, DecodingExpectedIdsRestoresText) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string base = shared + "/tokenizer-tests/ggml-vocab-" + GetParam() + ".gguf";
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file.ok()) << file.error();
  auto tokenizer = Tokenizer::from_gguf(file.value());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const auto texts = split_texts(test::read_file(base + ".inp"));
  const auto expected = read_expected(test::read_file(base + ".out"));
  int lossless = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    // Byte-level BPE is lossless; SentencePiece drops the dummy-prefix space it added.
    const std::string decoded = tokenizer->decode(expected[i]);
    std::string want = texts[i];
    if (decoded == want) ++lossless;
  }
  // A handful of texts are not round-trippable (e.g. SentencePiece collapses leading spaces into the prefix).
  EXPECT_GE(lossless, static_cast<int>(texts.size()) * 8 / 10) << lossless << " of " << texts.size();
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "mpt", "starcoder",
                                           "refact", "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace kestrel
