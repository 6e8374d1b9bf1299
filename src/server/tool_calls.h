// Tool calling: how a chat template's model writes tool calls, finding them in a reply, and a grammar that
// makes the reply a call (tool_choice "required" or a named function).
//
// Formats (the model families' own, as their chat templates render past calls):
// - Hermes (Qwen 2.5/3, Hermes): <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per call.
// - Llama 3.x: {"name": "f", "parameters": {...}} as the whole reply (after an optional <|python_tag|>).
// - Mistral: [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] ([TOOL_CALLS] is a control token, so the
//   decoded text may start with the JSON array itself).
// A reply that does not parse as calls of the declared functions is plain content.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

enum class ToolCallFormat { None, Hermes, Llama3, Mistral };

// From the template's source text (what it prints for past calls); None when it has no tool support.
ToolCallFormat detect_tool_call_format(const std::string& template_source);
const char* tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string id;         // 9 alphanumeric characters (Mistral's templates require exactly that)
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedReply {
  std::string content;          // the text outside the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};

// tools: the request's OpenAI tools array ([{"type": "function", "function": {"name", "parameters"}}]); a call
// of a function not declared there is not a call. seed: makes the call ids (same seed, same ids).
ParsedReply parse_tool_calls(ToolCallFormat format, const std::string& text, const nlohmann::ordered_json& tools, uint64_t seed);

// GBNF for a reply that is exactly one call, in the format, of one declared function (only_name: of that
// one), its arguments following the function's parameters schema. Error for an unsupported schema or an
// unknown name.
Result<std::string> tool_call_grammar(ToolCallFormat format, const nlohmann::ordered_json& tools, const std::string& only_name);

// Checks an OpenAI tools array: functions with unique names and object parameters.
Status validate_tools(const nlohmann::ordered_json& tools);

}  // namespace kestrel
