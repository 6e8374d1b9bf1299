#include "server/completion_response.h"

#include <algorithm>
#include <ctime>
#include <numeric>
#include <random>

namespace kestrel {

using json = nlohmann::json;

namespace {
std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}
}  // namespace

CompletionResponse::CompletionResponse(const CompletionParams& params, const Tokenizer& tokenizer, std::string model_name,
                                       ToolCallFormat tool_format)
    : params_(params),
      tokenizer_(tokenizer),
      model_name_(std::move(model_name)),
      id_(random_id(params.chat ? "chatcmpl-" : "cmpl-")),
      tool_format_(params.chat ? tool_format : ToolCallFormat::None),
      created_(static_cast<int64_t>(std::time(nullptr))),
      choices_(static_cast<size_t>(std::max(params.n, params.best_of))) {
  for (Choice& c : choices_) c.text = std::make_unique<ChoiceText>(tokenizer, params.stop);
}

json CompletionResponse::token_logprobs(const GeneratedToken& t) const {
  const std::string piece = tokenizer_.token_to_piece(t.token);
  if (params_.chat) {
    json top = json::array();
    for (const TokenLogprob& alt : t.top) {
      const std::string p = tokenizer_.token_to_piece(alt.token);
      top.push_back({{"token", p}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
    }
    return {{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
  }
  json top = json::object();
  for (const TokenLogprob& alt : t.top) top[tokenizer_.token_to_piece(alt.token)] = alt.logprob;
  return {{"token", piece}, {"logprob", t.logprob}, {"top", top}};
}

std::vector<json> CompletionResponse::consume(const StepOutput& out) {
  std::vector<json> chunks;
  if (out.index < 0 || out.index >= static_cast<int32_t>(choices_.size())) return chunks;
  n_prompt_ = out.n_prompt;
  Choice& c = choices_[static_cast<size_t>(out.index)];
  if (!c.finish.empty()) return chunks;  // already ended on a stop string
  std::string text;
  json logprobs = json::array();
  for (const GeneratedToken& t : out.tokens) {
    if (c.text->stopped()) break;
    text += c.text->push(t.token);
    ++c.n_tokens;
    c.cumulative_logprob += t.logprob;
    if (params_.logprobs >= 0) logprobs.push_back(token_logprobs(t));
  }
  if (c.text->stopped()) {
    c.finish = "stop";
  } else if (out.finish != FinishReason::None) {
    text += c.text->finish();
    c.finish = out.finish == FinishReason::Length ? "length" : out.finish == FinishReason::Cancelled ? "abort" : "stop";
    aborted_ |= out.finish == FinishReason::Cancelled;
  }
  if (!c.finish.empty()) ++n_finished_;
  c.content += text;
  for (auto& lp : logprobs) c.logprobs.push_back(lp);
  if (tool_format_ != ToolCallFormat::None) {
    // The text may be a call: nothing is streamed until it ends.
    if (c.finish.empty()) return chunks;
    read_tool_calls(c);
    if (params_.stream)
      chunks.push_back(chunk(out.index, c.reply.content, c.logprobs, c.finish,
                             c.reply.calls.empty() ? json(nullptr) : tool_calls_json(c.reply, true)));
    return chunks;
  }
  if (params_.stream && (!text.empty() || !c.finish.empty() || !logprobs.empty()))
    chunks.push_back(chunk(out.index, text, logprobs, c.finish));
  return chunks;
}

void CompletionResponse::read_tool_calls(Choice& c) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  c.reply = parse_tool_calls(tool_format_, c.content, params_.tools, rng());
  if (!c.reply.calls.empty() && c.finish == "stop") c.finish = "tool_calls";
}

json CompletionResponse::tool_calls_json(const ParsedReply& reply, bool with_index) const {
  json calls = json::array();
  for (size_t i = 0; i < reply.calls.size(); ++i) {
    const ToolCall& call = reply.calls[i];
    json entry = {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
    if (with_index) entry["index"] = i;
    calls.push_back(std::move(entry));
  }
  return calls;
}

bool CompletionResponse::all_stopped_by_text() const {
  for (const Choice& c : choices_)
    if (!c.text->stopped()) return false;
  return true;
}

json CompletionResponse::chunk(int32_t index, const std::string& text, const json& logprobs,
                               const std::string& finish, const json& tool_calls) const {
  json choice = {{"index", index}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
  json lp = nullptr;
  if (params_.logprobs >= 0) {
    if (params_.chat) {
      lp = {{"content", logprobs}};
    } else {
      lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
      for (const json& e : logprobs) {
        lp["tokens"].push_back(e["token"]);
        lp["token_logprobs"].push_back(e["logprob"]);
        lp["top_logprobs"].push_back(e["top"]);
      }
    }
  }
  choice["logprobs"] = lp;
  if (params_.chat) {
    choice["delta"] = finish.empty() || !text.empty() ? json{{"content", text}} : json::object();
    if (!tool_calls.is_null()) choice["delta"]["tool_calls"] = tool_calls;
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_name_},
            {"choices", json::array({choice})}};
  }
  choice["text"] = text;
  return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_name_},
          {"choices", json::array({choice})}};
}

json CompletionResponse::first_chat_chunks() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i)
    choices.push_back({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                       {"finish_reason", nullptr}});
  return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_name_},
          {"choices", choices}};
}

int32_t CompletionResponse::n_generated() const {
  int32_t n = 0;
  for (const Choice& c : choices_) n += c.n_tokens;
  return n;
}

json CompletionResponse::usage() const {
  return {{"prompt_tokens", n_prompt_}, {"completion_tokens", n_generated()}, {"total_tokens", n_prompt_ + n_generated()}};
}

json CompletionResponse::usage_chunk() const {
  return {{"id", id_}, {"object", params_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", json::array()}, {"usage", usage()}};
}

json CompletionResponse::full_response() const {
  std::vector<size_t> order(choices_.size());  // the choices to return, best first when best_of > n
  std::iota(order.begin(), order.end(), 0);
  if (params_.best_of > params_.n) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
    });
    order.resize(static_cast<size_t>(params_.n));
  }
  json choices = json::array();
  for (size_t i = 0; i < order.size(); ++i) {
    const Choice& c = choices_[order[i]];
    json lp = nullptr;
    if (params_.logprobs >= 0) {
      if (params_.chat) {
        lp = {{"content", c.logprobs}};
      } else {
        lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
        size_t offset = 0;
        for (const json& e : c.logprobs) {
          lp["tokens"].push_back(e["token"]);
          lp["token_logprobs"].push_back(e["logprob"]);
          lp["top_logprobs"].push_back(e["top"]);
          lp["text_offset"].push_back(offset);
          offset += e["token"].get<std::string>().size();
        }
      }
    }
    json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", c.finish.empty() ? json(nullptr) : json(c.finish)}};
    if (params_.chat && tool_format_ != ToolCallFormat::None && !c.reply.calls.empty()) {
      choice["message"] = {{"role", "assistant"},
                           {"content", c.reply.content.empty() ? json(nullptr) : json(c.reply.content)},
                           {"tool_calls", tool_calls_json(c.reply, false)}};
    } else if (params_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.content}};
    } else {
      choice["text"] = c.content;
    }
    choices.push_back(choice);
  }
  return {{"id", id_}, {"object", params_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
          {"model", model_name_}, {"choices", choices}, {"usage", usage()}};
}

}  // namespace kestrel
