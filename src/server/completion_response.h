// Builds OpenAI response bodies for one request from its step outputs: the whole response (non-streaming)
// or the SSE chunks as tokens arrive. Holds per-choice text (stop strings, UTF-8) and logprobs. It expects
// params.best_of choices from the engine (n of them are returned).
//
// Tool calling (tool_format not None): a choice's text is held until it ends, then read for tool calls in
// the model's format (server/tool_calls.h); calls become message.tool_calls with finish_reason
// "tool_calls", streamed as one delta holding the calls whole.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/choice_text.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

class CompletionResponse {
 public:
  CompletionResponse(const CompletionParams& params, const Tokenizer& tokenizer, std::string model_name,
                     ToolCallFormat tool_format = ToolCallFormat::None);

  // Takes one step output; in streaming mode returns the chunks to send now (one per choice that moved).
  std::vector<nlohmann::json> consume(const StepOutput& out);
  // True once every choice finished (by the engine or by a stop string).
  bool done() const { return n_finished_ == static_cast<int32_t>(choices_.size()); }
  // True when a choice was cut off by the engine (cancelled: the server shut down before it finished). Such
  // a choice ends with finish_reason "abort", and the response must say it is incomplete.
  bool aborted() const { return aborted_; }
  // True when every remaining choice ended on a stop string, so the request can be cancelled.
  bool all_stopped_by_text() const;

  // The non-streaming body. With best_of > n, the n choices of highest cumulative logprob, best first.
  nlohmann::json full_response() const;
  nlohmann::json usage_chunk() const;       // the stream's usage chunk (stream_options.include_usage)
  nlohmann::json first_chat_chunks() const;  // the chat stream's opening chunk (role), as one chunk
  int32_t n_generated() const;
  int32_t n_prompt() const { return n_prompt_; }

 private:
  struct Choice {
    std::unique_ptr<ChoiceText> text;
    std::string content;           // all text so far
    int32_t n_tokens = 0;
    double cumulative_logprob = 0;  // best_of ranks the choices by this
    std::string finish;            // "" while running
    nlohmann::json logprobs = nlohmann::json::array();  // per-token entries (chat format or completion lists)
    ParsedReply reply;             // tool calling: the ended text, read for calls
  };
  // Tool calling: reads the ended choice's text for calls (finish_reason becomes "tool_calls" if any).
  void read_tool_calls(Choice& c);
  nlohmann::json tool_calls_json(const ParsedReply& reply, bool with_index) const;
  // tool_calls: the delta's calls (chat), null for none.
  nlohmann::json chunk(int32_t index, const std::string& text, const nlohmann::json& logprobs,
                       const std::string& finish, const nlohmann::json& tool_calls = nullptr) const;
  nlohmann::json token_logprobs(const GeneratedToken& t) const;
  nlohmann::json usage() const;

  const CompletionParams& params_;
  const Tokenizer& tokenizer_;
  std::string model_name_, id_;
  ToolCallFormat tool_format_;
  int64_t created_;
  std::vector<Choice> choices_;
  int32_t n_prompt_ = 0, n_finished_ = 0;
  bool aborted_ = false;
};

}  // namespace kestrel
