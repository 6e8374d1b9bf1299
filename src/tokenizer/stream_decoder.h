// Incremental detokenization for streaming: feed tokens one at a time, get back well-formed UTF-8 only;
// bytes of a character split across tokens are held until it completes, and bytes that cannot form one
// become U+FFFD. Pushing tokens one at a time gives the same text as decoding them together.
#pragma once
#include <string>

#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

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
    return utf8::take_well_formed(pending_, false);
  }
  // Whatever is still held at the end of generation (an incomplete character becomes U+FFFD).
  std::string flush() { return utf8::take_well_formed(pending_, true); }

 private:
  const Tokenizer& tokenizer_;
  bool strip_leading_space_;
  std::string pending_;
};

}  // namespace kestrel
