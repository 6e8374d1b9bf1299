// A rendered chat prompt to token ids: special-token text (<|im_start|>, [INST], ...) parsed as special
// tokens, and BOS added unless the template already wrote it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel {

// nullopt when the prompt is longer than max_tokens (tokenising stops there).
std::optional<std::vector<int32_t>> encode_chat_prompt(const Tokenizer& tokenizer, const std::string& text, size_t max_tokens);

}  // namespace kestrel
