// A model's chat template (Jinja, from GGUF tokenizer.chat_template or a file), rendered for a list of
// messages the way Hugging Face's apply_chat_template does: variables messages, add_generation_prompt,
// bos_token and eos_token. Templates using constructs outside the supported subset fail at parse or
// render time with a message naming the construct.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja.h"

namespace kestrel {

struct ChatMessage {
  std::string role;     // system, user, assistant or tool
  std::string content;
  nlohmann::ordered_json tool_calls = nullptr;  // assistant: its calls, OpenAI's form (null: none)
  std::string tool_call_id = "";                // tool: the call this result answers
  std::string name = "";                        // tool: the function's name (when given)
};

// ChatML (<|im_start|>role\n...<|im_end|>), the format servers fall back to for a model without a template.
inline constexpr const char* kChatMlTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(const std::string& source);
  // tools: the OpenAI tools array the template offers the model (null: none). A call's arguments given as
  // JSON text reach the template as an object (templates print them with tojson).
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::string& bos_token, const std::string& eos_token,
                             const nlohmann::ordered_json& tools = nullptr) const;

 private:
  jinja::Template template_;
};

}  // namespace kestrel
