#include "server/embedding_response.h"

#include <cstring>

namespace kestrel {

std::string base64_encode(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = data[i], b1 = i + 1 < n ? data[i + 1] : 0, b2 = i + 2 < n ? data[i + 2] : 0;
    const uint32_t triple = b0 << 16 | b1 << 8 | b2;
    out += kDigits[triple >> 18 & 63];
    out += kDigits[triple >> 12 & 63];
    out += i + 1 < n ? kDigits[triple >> 6 & 63] : '=';
    out += i + 2 < n ? kDigits[triple & 63] : '=';
  }
  return out;
}

nlohmann::json embedding_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                                  int64_t prompt_tokens) {
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    nlohmann::json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      std::vector<uint8_t> bytes(vectors[i].size() * 4);  // little-endian float32s
      for (size_t k = 0; k < vectors[i].size(); ++k) {
        uint32_t bits;
        std::memcpy(&bits, &vectors[i][k], 4);
        for (int b = 0; b < 4; ++b) bytes[k * 4 + static_cast<size_t>(b)] = static_cast<uint8_t>(bits >> (8 * b));
      }
      item["embedding"] = base64_encode(bytes.data(), bytes.size());
    } else {
      item["embedding"] = vectors[i];
    }
    data.push_back(std::move(item));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace kestrel
