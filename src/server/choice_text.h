// The text of one choice as its tokens arrive: incremental detokenization (whole UTF-8 characters only)
// and stop strings. Text that might be the start of a stop string is held back until it is clear; when a
// stop string appears, the text before it is the last to be returned.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

class ChoiceText {
 public:
  ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stops)
      : decoder_(tokenizer), stops_(std::move(stops)) {}

  // Text that can be sent now. After a stop string matched, stopped() is true and push returns "".
  std::string push(int32_t token);
  // At the end of generation: whatever is still held (no stop string can complete any more).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;  // decoded text not yet returned
  bool stopped_ = false;
};

}  // namespace kestrel
