// Every test text in ../shared/tokenizer-tests tokenizes to llama.cpp's ids (no BOS/EOS, special text not
// parsed), and decoding the expected ids gives back the text where the tokenizer is lossless.
#include <filesystem>
#include <memory>
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

struct VocabCase {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
};

// Loads ggml-vocab-NAME.gguf with its texts and expected ids (fails the test on any problem).
VocabCase load_case(const std::string& shared, const std::string& name) {
  const std::string base = shared + "/tokenizer-tests/ggml-vocab-" + name + ".gguf";
  VocabCase c;
  auto file = GgufFile::open(base);
  EXPECT_TRUE(file.ok()) << file.error();
  if (!file.ok()) return c;
  auto tokenizer = Tokenizer::from_gguf(file.value());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error();
  if (!tokenizer.ok()) return c;
  c.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer).value());
  c.texts = split_texts(test::read_file(base + ".inp"));
  c.expected = read_expected(test::read_file(base + ".out"));
  EXPECT_EQ(c.texts.size(), c.expected.size());
  EXPECT_GT(c.texts.size(), 10u);
  return c;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, MatchesReferenceIds) {
  KESTREL_REQUIRE_SHARED(shared);
  const VocabCase c = load_case(shared, GetParam());
  ASSERT_TRUE(c.tokenizer && c.texts.size() == c.expected.size());
  int mismatches = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) {
    const auto ids = c.tokenizer->encode(c.texts[i], false, false);
    EXPECT_EQ(ids, c.expected[i]) << "text #" << i << ": '" << c.texts[i] << "'";
    mismatches += ids != c.expected[i];
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(TokenizerVectors, DecodingExpectedIdsRestoresText) {
  KESTREL_REQUIRE_SHARED(shared);
  const VocabCase c = load_case(shared, GetParam());
  ASSERT_TRUE(c.tokenizer && c.texts.size() == c.expected.size());
  int lossless = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) lossless += c.tokenizer->decode(c.expected[i]) == c.texts[i];
  const bool spm = c.tokenizer->vocab().type == VocabType::Spm;
  // Byte-level BPE is lossless on every text. SentencePiece's decode drops the dummy-prefix space, so a text
  // that itself starts with a space does not come back exactly.
  size_t leading_space = 0;
  for (const auto& t : c.texts) leading_space += !t.empty() && t[0] == ' ';
  EXPECT_GE(static_cast<size_t>(lossless), c.texts.size() - (spm ? leading_space : 0))
      << lossless << " of " << c.texts.size();
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
