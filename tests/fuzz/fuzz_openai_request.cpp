// libFuzzer target: any request body must parse into parameters within their documented ranges, or give
// a 400 error with a message; never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    auto parsed = kestrel::parse_completion_request(body, chat);
    if (auto* e = std::get_if<kestrel::ApiError>(&parsed)) {
      if (e->status != 400 || e->message.empty()) std::abort();
      (void)kestrel::error_body(*e).dump();
      continue;
    }
    const auto& p = std::get<kestrel::CompletionParams>(parsed);
    if (p.n < 1 || p.n > 16 || p.logprobs < -1 || p.logprobs > 20) std::abort();
    if (!p.sampling.validate().ok()) std::abort();
    if (chat && p.messages.empty()) std::abort();
  }
  auto embedding = kestrel::parse_embedding_request(body);
  if (auto* e = std::get_if<kestrel::ApiError>(&embedding)) {
    if (e->status != 400 || e->message.empty()) std::abort();
  } else {
    const auto& p = std::get<kestrel::EmbeddingParams>(embedding);
    if (p.inputs.empty() || p.inputs.size() > kestrel::kMaxEmbeddingInputs || p.dimensions < 0) std::abort();
  }
  return 0;
}
