// Parsing and validating OpenAI-style request bodies (/v1/completions, /v1/chat/completions and
// /v1/embeddings) into
// plain fields. Every problem is reported with the parameter it concerns; nothing here throws.
#pragma once
#include <cstdint>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sample/sampler.h"
#include "tokenizer/chat_template.h"

namespace kestrel {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: not about one parameter
};

struct CompletionParams {
  bool chat = false;
  std::string model;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  // Completions: the prompt as text, or as token ids when prompt_is_tokens.
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;    // chat
  int32_t max_tokens = -1;              // -1: as many as the context allows (chat default)
  SamplingParams sampling;              // with OpenAI's defaults (temperature 1, no top-k/top-p/min-p)
  bool seeded = false;                  // a seed was given (else the server draws one)
  int32_t n = 1;
  int32_t best_of = 1;                  // completions: generate this many, return the n most likely
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // stop tokens (not included in the output)
  bool ignore_eos = false;
  int32_t logprobs = -1;                // -1: none; else how many top alternatives per token
  bool echo = false;
  std::string cache_salt;
  std::string grammar;                  // GBNF text the output must follow ("" none); json_object sets it
  nlohmann::ordered_json tools = nullptr;  // chat: the functions the model may call (OpenAI's tools array)
  std::string tool_choice = "auto";     // none, auto, required, or function (tool_choice_name)
  std::string tool_choice_name;
};

// body: the raw request bytes. Returns the parameters or the first problem found.
std::variant<CompletionParams, ApiError> parse_completion_request(const std::string& body, bool chat);

struct EmbeddingParams {
  std::string model;
  // One entry per input: its text, or its token ids (the API takes either).
  std::vector<std::variant<std::string, std::vector<int32_t>>> inputs;
  bool base64 = false;    // encoding_format "base64": little-endian float32s, base64-encoded
  int64_t dimensions = 0;  // 0: the model's width; another value must equal it
};

// At most kMaxEmbeddingInputs inputs per request (OpenAI's limit).
constexpr size_t kMaxEmbeddingInputs = 2048;
std::variant<EmbeddingParams, ApiError> parse_embedding_request(const std::string& body);

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_body(const ApiError& error);

}  // namespace kestrel
