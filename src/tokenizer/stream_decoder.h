// Incremental detokenization for streaming: feed tokens one at a time, get back only text that ends on a
// complete UTF-8 character; bytes of a character split across tokens are held until it completes.
#pragma once
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {

class StreamDecoder {
 public:
  // strip_leading_space: drop the SentencePiece space of the first piece (when output starts fresh).
  explicit StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space = false)
      : tokenizer_(tokenizer), strip_leading_space_(strip_leading_space) {}

  std::string push(int32_t token) {
    std::string piece = tokenizer_.token_to_piece(token);
    if (strip_leading_space_ && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip_leading_space_ = false;
    }
    pending_ += piece;
    const size_t n = utf8::complete_prefix(pending_);
    std::string ready = pending_.substr(0, n);
    pending_.erase(0, n);
    return ready;
  }
  // Whatever is still held (an incomplete character at the end of generation), emitted as is.
  std::string flush() { return std::exchange(pending_, std::string()); }

 private:
  const Tokenizer& tokenizer_;
  bool strip_leading_space_;
  std::string pending_;
};

}  // namespace kestrel
