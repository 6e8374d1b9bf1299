// A Jinja subset, enough for the chat templates models ship (Llama 3.x, Qwen 2.5/3, Mistral, DeepSeek,
// Gemma, Phi and others): text with {{ expressions }}, {% if / for / set %} statements and {# comments #},
// whitespace control (- markers, and trim_blocks + lstrip_blocks as Hugging Face renders templates),
// Python-like values (none, booleans, numbers, strings, lists, dicts), the usual operators, filters,
// tests, loop variables, namespace(), raise_exception() and common string/dict methods.
// Anything else — macros, call blocks, unknown filters — is an error naming it, at parse or render
// time; never a crash.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kestrel::jinja {

struct Node;

class Template {
 public:
  static Result<Template> parse(const std::string& source);
  // Renders with `context` (an object whose keys are the template's variables).
  Result<std::string> render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace kestrel::jinja
