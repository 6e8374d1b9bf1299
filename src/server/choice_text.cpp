#include "server/choice_text.h"

#include <algorithm>

namespace kestrel {

std::string ChoiceText::push(int32_t token) {
  if (stopped_) return "";
  held_ += decoder_.push(token);
  // The earliest complete stop string ends the text.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that could still grow into a stop string.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string ChoiceText::finish() {
  if (stopped_) return "";
  held_ += decoder_.flush();
  return std::exchange(held_, std::string());
}

}  // namespace kestrel
