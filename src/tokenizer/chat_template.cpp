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
                                         const std::string& bos_token, const std::string& eos_token,
                                         const nlohmann::ordered_json& tools) const {
  using json = nlohmann::ordered_json;
  json list = json::array();
  for (const ChatMessage& m : messages) {
    // Keys only when present: templates test `'tool_calls' in message` or `message.tool_calls is defined`.
    json message = {{"role", m.role}, {"content", m.content}};
    if (m.tool_calls.is_array() && !m.tool_calls.empty()) {
      json calls = m.tool_calls;
      for (json& call : calls)
        if (call.contains("function") && call["function"].contains("arguments") && call["function"]["arguments"].is_string()) {
          json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
          if (!args.is_discarded()) call["function"]["arguments"] = std::move(args);
        }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) message["name"] = m.name;
    list.push_back(std::move(message));
  }
  json context = {{"messages", list},
                  {"add_generation_prompt", add_generation_prompt},
                  {"bos_token", bos_token},
                  {"eos_token", eos_token}};
  if (tools.is_array() && !tools.empty()) context["tools"] = tools;
  return template_.render(context);
}

}  // namespace kestrel
