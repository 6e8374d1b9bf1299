#include "tokenizer/chat_template.h"

namespace kestrel {

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  auto t = jinja::Template::parse(source);
  if (!t.ok()) return Error{t.error()};
  ChatTemplate ct;
  ct.template_ = std::move(t).value();
  return ct;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const std::string& bos_token, const std::string& eos_token) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  const nlohmann::ordered_json context = {{"messages", list},
                                          {"add_generation_prompt", add_generation_prompt},
                                          {"bos_token", bos_token},
                                          {"eos_token", eos_token}};
  return template_.render(context);
}

}  // namespace kestrel
