// Byte-level BPE pre-tokenization: splits text into words with the regex chain of a tokenizer family
// (tokenizer.ggml.pre). Each regex further splits the pieces left by the previous one; text a regex
// does not match stays as its own piece. Regexes run with PCRE2 in UTF + Unicode-property mode.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kestrel {

class PreTokenizer {
 public:
  // Error for an unknown family name.
  static Result<std::shared_ptr<PreTokenizer>> for_family(const std::string& family);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  std::vector<std::string> split(std::string_view text) const;
  // Families whose words that are whole vocabulary entries skip BPE merging (Llama 3 style).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  PreTokenizer() = default;
  std::vector<void*> compiled_;  // pcre2_code_8*
  bool ignore_merges_ = false;
};

}  // namespace kestrel
