#include "tokenizer/chat_prompt.h"

namespace kestrel {

std::optional<std::vector<int32_t>> encode_chat_prompt(const Tokenizer& tokenizer, const std::string& text, size_t max_tokens) {
  const int32_t bos_id = tokenizer.vocab().bos;
  const std::string bos = bos_id >= 0 ? tokenizer.token_to_piece(bos_id, true) : "";
  const bool has_bos = !bos.empty() && text.compare(0, bos.size(), bos) == 0;
  return tokenizer.encode(text, !has_bos, /*parse_special=*/true, max_tokens);
}

}  // namespace kestrel
