#include "server/tool_calls.h"

#include <random>
#include <set>

#include "sample/json_schema_grammar.h"

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

const json* find_function(const json& tools, const std::string& name) {
  for (const json& t : tools)
    if (t.contains("function") && t["function"].value("name", "") == name) return &t["function"];
  return nullptr;
}

// One call object {"name": ..., "<args_key>": {...}} of a declared function, or nothing.
bool read_call(const json& object, const char* args_key, const json& tools, ToolCall& call) {
  if (!object.is_object() || !object.contains("name") || !object["name"].is_string()) return false;
  call.name = object["name"].get<std::string>();
  if (!find_function(tools, call.name)) return false;
  json args = object.contains(args_key) ? object[args_key] : object.value("arguments", json::object());
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return false;
  call.arguments = args.dump();
  return true;
}

std::string call_id(std::mt19937_64& rng) {
  static const char* alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id += alphabet[rng() % 62];
  return id;
}

}  // namespace

ToolCallFormat detect_tool_call_format(const std::string& source) {
  if (source.find("<tool_call>") != std::string::npos) return ToolCallFormat::Hermes;
  if (source.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::Mistral;
  if (source.find("\"parameters\": ") != std::string::npos && source.find("<|start_header_id|>") != std::string::npos)
    return ToolCallFormat::Llama3;
  return ToolCallFormat::None;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3";
    case ToolCallFormat::Mistral: return "mistral";
    default: return "none";
  }
}

ParsedReply parse_tool_calls(ToolCallFormat format, const std::string& text, const json& tools, uint64_t seed) {
  ParsedReply reply;
  reply.content = text;
  std::vector<ToolCall> calls;
  if (format == ToolCallFormat::Hermes) {
    std::string rest;
    size_t at = 0;
    for (;;) {
      const size_t open = text.find("<tool_call>", at);
      if (open == std::string::npos) break;
      const size_t close = text.find("</tool_call>", open);
      if (close == std::string::npos) return reply;
      rest += text.substr(at, open - at);
      ToolCall call;
      const json object = json::parse(text.substr(open + 11, close - open - 11), nullptr, false);
      if (!read_call(object, "arguments", tools, call)) return reply;
      calls.push_back(std::move(call));
      at = close + 12;
    }
    if (calls.empty()) return reply;
    reply.content = trim(rest + text.substr(at));
  } else if (format == ToolCallFormat::Llama3) {
    std::string body = trim(text);
    if (body.rfind("<|python_tag|>", 0) == 0) body = trim(body.substr(14));
    ToolCall call;
    if (!read_call(json::parse(body, nullptr, false), "parameters", tools, call)) return reply;
    calls.push_back(std::move(call));
    reply.content.clear();
  } else if (format == ToolCallFormat::Mistral) {
    std::string body = trim(text);
    if (body.rfind("[TOOL_CALLS]", 0) == 0) body = trim(body.substr(12));
    const json list = json::parse(body, nullptr, false);
    if (!list.is_array() || list.empty()) return reply;
    for (const json& object : list) {
      ToolCall call;
      if (!read_call(object, "arguments", tools, call)) return reply;
      calls.push_back(std::move(call));
    }
    reply.content.clear();
  } else {
    return reply;
  }
  std::mt19937_64 rng(seed ^ 0x7C0FFEE);
  for (ToolCall& call : calls) call.id = call_id(rng);
  reply.calls = std::move(calls);
  return reply;
}

Status validate_tools(const json& tools) {
  if (!tools.is_array()) return Error{"'tools' must be an array"};
  if (tools.size() > 128) return Error{"'tools' may list at most 128 functions"};
  std::set<std::string> names;
  for (const json& t : tools) {
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
      return Error{"each tool must be {\"type\": \"function\", \"function\": {...}}"};
    const json& f = t["function"];
    const std::string name = f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "";
    if (name.empty() || name.size() > 64 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
      return Error{"a function name must be 1-64 characters of a-z, A-Z, 0-9, _, - and ."};
    if (!names.insert(name).second) return Error{"function '" + name + "' is declared twice"};
    if (f.contains("parameters") && !f["parameters"].is_object())
      return Error{"the parameters of function '" + name + "' must be a JSON Schema object"};
  }
  return {};
}

Result<std::string> tool_call_grammar(ToolCallFormat format, const json& tools, const std::string& only_name) {
  if (format == ToolCallFormat::None) return Error{"this model's chat template has no tool-call format"};
  const char* args_key = format == ToolCallFormat::Llama3 ? "parameters" : "arguments";
  json alternatives = json::array();  // ordered: "name" comes first in the call
  for (const json& t : tools) {
    const json& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only_name.empty() && name != only_name) continue;
    json params = f.contains("parameters") ? f["parameters"] : json{{"type", "object"}};
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                            {"required", {"name", args_key}},
                            {"additionalProperties", false}});
  }
  if (alternatives.empty()) return Error{"no declared function is named '" + only_name + "'"};
  const json call = alternatives.size() == 1 ? alternatives[0] : json{{"anyOf", alternatives}};
  switch (format) {
    case ToolCallFormat::Hermes: return json_schema_to_grammar(call, "<tool_call>\n", "\n</tool_call>");
    case ToolCallFormat::Mistral: return json_schema_to_grammar(call, "[", "]");
    default: return json_schema_to_grammar(call, "", "");
  }
}

}  // namespace kestrel
