// The body of a /v1/embeddings answer in OpenAI's shape: {"object": "list", "data": [{"object":
// "embedding", "index", "embedding"}], "model", "usage"}; each vector as a JSON array of numbers or, for
// encoding_format "base64", as its little-endian float32 bytes in base64 (what the openai clients ask for
// by default and decode).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel {

// bytes -> base64 (RFC 4648, with padding).
std::string base64_encode(const uint8_t* data, size_t n);

nlohmann::json embedding_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                                  int64_t prompt_tokens);

}  // namespace kestrel
