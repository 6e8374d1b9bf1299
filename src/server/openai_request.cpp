#include "server/openai_request.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <variant>

#include "sample/grammar.h"
#include "sample/json_schema_grammar.h"
#include "server/tool_calls.h"

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;  // keeps a JSON Schema's property order

// Reads optional fields of one JSON object, remembering the first type or range problem.
class Fields {
 public:
  explicit Fields(const json& object) : object_(object) {}

  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  void number(const char* key, float& out, double lo, double hi) {
    const json* v = find(key);
    if (!v || failed()) return;
    if (!v->is_number()) return fail(key, std::string("'") + key + "' must be a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      return fail(key, std::string("'") + key + "' must be in [" + fmt(lo) + ", " + fmt(hi) + "]");
    out = static_cast<float>(x);
  }
  void integer(const char* key, int64_t& out, int64_t lo, int64_t hi) {
    const json* v = find(key);
    if (!v || failed()) return;
    if (!v->is_number_integer() && !(v->is_number_float() && v->get<double>() == std::floor(v->get<double>())))
      return fail(key, std::string("'") + key + "' must be an integer");
    const double x = v->get<double>();
    if (x < static_cast<double>(lo) || x > static_cast<double>(hi))
      return fail(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out = static_cast<int64_t>(x);
  }
  void boolean(const char* key, bool& out) {
    const json* v = find(key);
    if (!v || failed()) return;
    if (!v->is_boolean()) return fail(key, std::string("'") + key + "' must be a boolean");
    out = v->get<bool>();
  }
  void string(const char* key, std::string& out) {
    const json* v = find(key);
    if (!v || failed()) return;
    if (!v->is_string()) return fail(key, std::string("'") + key + "' must be a string");
    out = v->get<std::string>();
  }
  void fail(const std::string& param, const std::string& message) {
    if (!failed()) error_ = ApiError{400, message, "invalid_request_error", param};
  }
  bool failed() const { return error_.has_value(); }
  const ApiError& error() const { return *error_; }

 private:
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  }
  const json& object_;
  std::optional<ApiError> error_;
};

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

void parse_token_list(Fields& f, const json& list, const char* key, std::vector<int32_t>& out) {
  for (const json& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > kMaxTokenId)
      return f.fail(key, std::string("'") + key + "' must hold non-negative token ids");
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

// {"token id": bias, ...} with ids as decimal strings and biases in [-100, 100].
void parse_logit_bias(Fields& f, const json& object, std::vector<std::pair<int32_t, float>>& out) {
  const char* key = "logit_bias";
  if (!object.is_object() || object.size() > 1024)
    return f.fail(key, "'logit_bias' must be an object of at most 1024 token ids to biases");
  for (const auto& [id_text, bias] : object.items()) {
    char* end = nullptr;
    const long long id = std::strtoll(id_text.c_str(), &end, 10);
    if (id_text.empty() || *end != '\0' || id < 0 || id > kMaxTokenId || !std::isdigit(static_cast<unsigned char>(id_text[0])))
      return f.fail(key, "'logit_bias' keys must be token ids, e.g. {\"50256\": -100}");
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 || bias.get<double>() > 100)
      return f.fail(key, "'logit_bias' values must be numbers in [-100, 100]");
    out.emplace_back(static_cast<int32_t>(id), bias.get<float>());
  }
}

// Parameters of the OpenAI API that kestrel does not implement yet: asking for them is an error rather
// than a silently different answer. (A value that asks for nothing, such as response_format "text" or an
// empty tools list, is accepted.)
void refuse_unsupported(Fields& f, bool chat) {
  if (const json* v = f.find("functions"); v && !(v->is_array() && v->empty()))
    f.fail("functions", "'functions' (the deprecated form) is not supported; use 'tools'");
  if (const json* v = f.find("function_call"); v && !(v->is_string() && (v->get<std::string>() == "none" || v->get<std::string>() == "auto")))
    f.fail("function_call", "'function_call' (the deprecated form) is not supported; use 'tool_choice'");
  if (!chat)
    for (const char* key : {"tools", "tool_choice"})
      if (const json* v = f.find(key); v && !(v->is_array() && v->empty()) && !(v->is_string() && v->get<std::string>() == "none"))
        f.fail(key, std::string("'") + key + "' is for chat completions");
  if (!chat)
    if (const json* v = f.find("suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
      f.fail("suffix", "'suffix' (insertion) is not supported");
}

// Tool calling (chat): tools and tool_choice. A forced call (required, or a named function) is enforced
// by a grammar the server builds for the model's format.
void parse_tools(Fields& f, CompletionParams& p) {
  if (const json* tools = f.find("tools"); tools && !f.failed()) {
    if (Status s = validate_tools(*tools); !s.ok()) return f.fail("tools", s.error());
    if (!tools->empty()) p.tools = *tools;
  }
  const json* choice = f.find("tool_choice");
  if (!choice || f.failed()) return;
  if (choice->is_string() && (*choice == "none" || *choice == "auto" || *choice == "required")) {
    p.tool_choice = choice->get<std::string>();
  } else if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("function") &&
             (*choice)["function"].is_object() && (*choice)["function"].contains("name") && (*choice)["function"]["name"].is_string()) {
    p.tool_choice = "function";
    p.tool_choice_name = (*choice)["function"]["name"].get<std::string>();
  } else {
    return f.fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (p.tool_choice != "none" && p.tool_choice != "auto" && p.tools.is_null())
    return f.fail("tool_choice", "'tool_choice' " + p.tool_choice + " needs 'tools'");
  if (p.tool_choice == "function") {
    bool known = false;
    for (const json& t : p.tools) known |= t["function"]["name"] == p.tool_choice_name;
    if (!known) return f.fail("tool_choice", "'tool_choice' names '" + p.tool_choice_name + "', which is not among the tools");
  }
  if (p.tool_choice != "none" && p.tool_choice != "auto" && !p.grammar.empty())
    f.fail("tool_choice", "a forced tool call cannot be combined with 'response_format' or 'grammar'");
}

// Structured output: response_format (text, json_object, json_schema) and kestrel's
// `grammar` extension (GBNF text, compiled by the server); at most one of them constrains the output.
void parse_output_format(Fields& f, CompletionParams& p) {
  constexpr size_t kMaxGrammarBytes = 256 * 1024;
  f.string("grammar", p.grammar);
  if (p.grammar.size() > kMaxGrammarBytes)
    return f.fail("grammar", "'grammar' is longer than " + std::to_string(kMaxGrammarBytes) + " bytes");
  const json* rf = f.find("response_format");
  if (!rf || f.failed()) return;
  const std::string type = rf->is_object() && rf->contains("type") && (*rf)["type"].is_string() ? (*rf)["type"].get<std::string>() : "";
  if (type == "text") return;
  if (type == "json_object") {
    if (!p.grammar.empty()) return f.fail("response_format", "give either 'response_format' or 'grammar', not both");
    p.grammar = json_grammar_text(true);
    return;
  }
  if (type == "json_schema") {
    if (!p.grammar.empty()) return f.fail("response_format", "give either 'response_format' or 'grammar', not both");
    const json* spec = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
    if (!spec || !spec->is_object() || !spec->contains("schema"))
      return f.fail("response_format", "'response_format' of type 'json_schema' needs 'json_schema': {\"schema\": {...}}");
    auto grammar = json_schema_to_grammar((*spec)["schema"]);
    if (!grammar.ok()) return f.fail("response_format", grammar.error());
    p.grammar = std::move(grammar).value();
    return;
  }
  f.fail("response_format", "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                            "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}");
}

void parse_messages(Fields& f, const json& list, std::vector<ChatMessage>& out) {
  if (!list.is_array() || list.empty()) return f.fail("messages", "'messages' must be a non-empty array");
  for (const json& m : list) {
    if (!m.is_object()) return f.fail("messages", "each message must be an object");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return f.fail("messages", "each message needs a string 'role'");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
      return f.fail("messages", "unknown role '" + r + "'");
    ChatMessage msg{r == "developer" ? "system" : r, ""};
    const auto content = m.find("content");
    if (content != m.end() && !content->is_null()) {
      if (content->is_string()) {
        msg.content = content->get<std::string>();
      } else if (content->is_array()) {
        for (const json& part : *content) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
            return f.fail("messages", "only text content parts are supported");
          msg.content += part["text"].get<std::string>();
        }
      } else {
        return f.fail("messages", "message 'content' must be a string or an array of text parts");
      }
    }
    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (msg.role != "assistant" || !calls->is_array()) return f.fail("messages", "'tool_calls' must be an array on an assistant message");
      for (const json& call : *calls)
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("name") || !call["function"]["name"].is_string())
          return f.fail("messages", "each tool call needs 'function': {\"name\": ..., \"arguments\": ...}");
      msg.tool_calls = *calls;
    }
    for (const auto& [key, field] : {std::pair<const char*, std::string*>{"tool_call_id", &msg.tool_call_id}, {"name", &msg.name}})
      if (const auto v = m.find(key); v != m.end() && !v->is_null()) {
        if (!v->is_string()) return f.fail("messages", std::string("'") + key + "' must be a string");
        *field = v->get<std::string>();
      }
    out.push_back(std::move(msg));
  }
}

}  // namespace

nlohmann::json error_body(const ApiError& error) {
  return {{"error",
           {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
            {"code", nullptr}}}};
}

std::variant<EmbeddingParams, ApiError> parse_embedding_request(const std::string& body) {
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return ApiError{400, "the request body is not valid JSON (or not valid UTF-8)", "invalid_request_error", ""};
  if (!root.is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", ""};
  EmbeddingParams p;
  Fields f(root);
  f.string("model", p.model);
  std::string format = "float";
  f.string("encoding_format", format);
  if (!f.failed() && format != "float" && format != "base64")
    f.fail("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
  p.base64 = format == "base64";
  f.integer("dimensions", p.dimensions, 1, 1 << 24);
  const json* input = f.find("input");
  if (!f.failed() && !input) f.fail("input", "'input' is required: a string, an array of strings, or token ids");
  if (f.failed()) return f.error();
  // A string, an array of strings, an array of token ids, or an array of arrays of token ids.
  const bool one_token_list = input->is_array() && !input->empty() && (*input)[0].is_number();
  if (input->is_string()) {
    p.inputs.emplace_back(input->get<std::string>());
  } else if (one_token_list) {
    std::vector<int32_t> ids;
    parse_token_list(f, *input, "input", ids);
    p.inputs.emplace_back(std::move(ids));
  } else if (input->is_array() && !input->empty() && input->size() <= kMaxEmbeddingInputs) {
    for (const json& item : *input) {
      if (item.is_string()) {
        p.inputs.emplace_back(item.get<std::string>());
      } else if (item.is_array()) {
        std::vector<int32_t> ids;
        parse_token_list(f, item, "input", ids);
        p.inputs.emplace_back(std::move(ids));
      } else {
        f.fail("input", "'input' items must be strings or arrays of token ids");
      }
      if (f.failed()) break;
    }
  } else {
    f.fail("input", "'input' must be a string, or a non-empty array of at most " + std::to_string(kMaxEmbeddingInputs) +
                        " strings or token-id arrays");
  }
  if (f.failed()) return f.error();
  for (const auto& in : p.inputs)
    if ((std::holds_alternative<std::string>(in) && std::get<std::string>(in).empty()) ||
        (std::holds_alternative<std::vector<int32_t>>(in) && std::get<std::vector<int32_t>>(in).empty()))
      return ApiError{400, "'input' must not hold an empty string or token list", "invalid_request_error", "input"};
  return p;
}

std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, bool chat) {
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);  // also rejects invalid UTF-8
  if (root.is_discarded()) return ApiError{400, "the request body is not valid JSON (or not valid UTF-8)", "invalid_request_error", ""};
  if (!root.is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", ""};
  CompletionParams p;
  p.chat = chat;
  p.sampling.temperature = 1.0f;
  p.sampling.top_k = 0;
  p.sampling.top_p = 1.0f;
  p.sampling.min_p = 0.0f;
  p.sampling.penalty_last_n = -1;
  Fields f(root);
  f.string("model", p.model);
  f.boolean("stream", p.stream);
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) f.fail("stream_options", "'stream_options' must be an object");
    else if (!p.stream) f.fail("stream_options", "'stream_options' is only allowed with 'stream': true");
    else Fields(*so).boolean("include_usage", p.include_usage);
  }
  if (chat) {
    if (const json* m = f.find("messages")) parse_messages(f, *m, p.messages);
    else f.fail("messages", "'messages' is required");
  } else if (const json* prompt = f.find("prompt")) {
    if (prompt->is_string()) {
      p.prompt_text = prompt->get<std::string>();
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      p.prompt_text = (*prompt)[0].get<std::string>();
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
      p.prompt_is_tokens = true;
      parse_token_list(f, *prompt, "prompt", p.prompt_tokens);
    } else {
      f.fail("prompt", "'prompt' must be a string, one string in an array, or an array of token ids");
    }
  } else {
    f.fail("prompt", "'prompt' is required");
  }
  int64_t i64 = -1;
  f.integer(chat && f.find("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", i64, 1, 1 << 24);
  p.max_tokens = i64 > 0 ? static_cast<int32_t>(i64) : (chat ? -1 : 16);
  f.number("temperature", p.sampling.temperature, 0, 2);
  f.number("top_p", p.sampling.top_p, 0, 1);
  if (p.sampling.top_p <= 0) f.fail("top_p", "'top_p' must be in (0, 1]");
  i64 = 0;
  f.integer("top_k", i64, -1, 1 << 20);
  p.sampling.top_k = static_cast<int32_t>(i64 < 0 ? 0 : i64);
  f.number("min_p", p.sampling.min_p, 0, 1);
  f.number("presence_penalty", p.sampling.presence_penalty, -2, 2);
  f.number("frequency_penalty", p.sampling.frequency_penalty, -2, 2);
  f.number("repetition_penalty", p.sampling.repeat_penalty, 0.01, 10);
  i64 = -1;
  f.integer("seed", i64, std::numeric_limits<int64_t>::min() / 2, std::numeric_limits<int64_t>::max() / 2);
  if (f.find("seed")) {
    p.seeded = true;
    p.sampling.seed = static_cast<uint64_t>(i64);
  }
  i64 = 1;
  f.integer("n", i64, 1, 16);
  p.n = static_cast<int32_t>(i64);
  if (!chat) {
    i64 = p.n;
    f.integer("best_of", i64, 1, 16);
    p.best_of = static_cast<int32_t>(i64);
    if (p.best_of < p.n) f.fail("best_of", "'best_of' must be at least 'n'");
    else if (p.best_of > p.n && p.stream) f.fail("best_of", "'best_of' cannot be used with 'stream': true");
  }
  if (const json* bias = f.find("logit_bias")) parse_logit_bias(f, *bias, p.sampling.logit_bias);
  refuse_unsupported(f, chat);
  if (const json* stop = f.find("stop")) {
    if (stop->is_string() && !stop->get<std::string>().empty()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 16) {
      for (const json& s : *stop) {
        if (!s.is_string() || s.get<std::string>().empty()) {
          f.fail("stop", "'stop' must be a non-empty string or an array of up to 16 of them");
          break;
        }
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      f.fail("stop", "'stop' must be a non-empty string or an array of up to 16 of them");
    }
  }
  if (const json* ids = f.find("stop_token_ids")) {
    if (!ids->is_array()) f.fail("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    else parse_token_list(f, *ids, "stop_token_ids", p.stop_token_ids);
  }
  f.boolean("ignore_eos", p.ignore_eos);
  f.boolean("echo", p.echo);
  if (p.echo) f.fail("echo", "'echo' is not supported");
  f.string("cache_salt", p.cache_salt);
  parse_output_format(f, p);
  if (chat) parse_tools(f, p);
  if (chat) {
    bool want = false;
    f.boolean("logprobs", want);
    i64 = 0;
    f.integer("top_logprobs", i64, 0, 20);
    if (f.find("top_logprobs") && !want) f.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    p.logprobs = want ? static_cast<int32_t>(i64) : -1;
  } else {
    i64 = -1;
    f.integer("logprobs", i64, 0, 20);
    p.logprobs = static_cast<int32_t>(i64);
  }
  if (f.failed()) return f.error();
  return p;
}

}  // namespace kestrel
