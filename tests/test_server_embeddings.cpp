// /v1/embeddings end to end on stories260K: a text's vector is the same alone and in a request of 16
// (while completions run beside it), base64 carries the same floats, token-id input equals its text, and
// bad requests get a 400 with the parameter named.
#include <cmath>
#include <cstring>
#include <future>

#include "server_fixture.h"

namespace kestrel {
namespace {

std::vector<float> decode_base64_floats(const std::string& text) {
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* at = std::strchr(digits, c);
    if (!at || c == '\0') return {};
    acc = acc << 6 | static_cast<uint32_t>(at - digits);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 | static_cast<uint32_t>(bytes[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

class EmbeddingsTest : public ServerTest {
 protected:
  // The vectors of one request, in index order.
  std::vector<std::vector<float>> embed(const json& input, const std::string& format = "float") {
    auto r = post("/v1/embeddings", json{{"input", input}, {"model", "x"}, {"encoding_format", format}}.dump());
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j.value("object", ""), "list");
    std::vector<std::vector<float>> out;
    for (const json& d : j["data"]) {
      EXPECT_EQ(d["object"], "embedding");
      EXPECT_EQ(d["index"].get<size_t>(), out.size());
      out.push_back(format == "base64" ? decode_base64_floats(d["embedding"].get<std::string>())
                                       : d["embedding"].get<std::vector<float>>());
    }
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
    return out;
  }
};

TEST_F(EmbeddingsTest, ATextsVectorIsTheSameAloneAndInARequestOf16) {
  start();
  std::vector<std::string> texts;
  for (int i = 0; i < 16; ++i)
    texts.push_back(std::string(i % 2 ? "The cat sat on the mat" : "Once upon a time there was a girl") +
                    std::string(static_cast<size_t>(i), '!') + " number " + std::to_string(i));
  // Completions run beside the embeddings.
  auto busy = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", server_->port());
    return c.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 64})", "application/json");
  });
  const auto batch = embed(texts);
  ASSERT_EQ(batch.size(), 16u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = embed(texts[i]);
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(alone[0].size(), static_cast<size_t>(model_->hparams().n_embd));
    EXPECT_EQ(alone[0], batch[i]) << "input " << i;
    double norm = 0;
    for (float v : alone[0]) norm += static_cast<double>(v) * v;
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
  }
  EXPECT_NE(batch[0], batch[1]);
  EXPECT_EQ(embed(texts, "base64"), batch);
  const std::vector<int32_t> ids = tokenizer_->encode(texts[3], true);
  EXPECT_EQ(embed(json(ids)).at(0), batch[3]);
  EXPECT_EQ(embed(json::array({json(ids), json(texts[4])})).at(1), batch[4]);
  auto done = busy.get();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  EXPECT_TRUE(wait_idle());
}

TEST_F(EmbeddingsTest, BadRequestsGetA400NamingTheParameter) {
  start();
  const std::string e = "/v1/embeddings";
  expect_error(e, "{not json", 400);
  expect_error(e, "{}", 400, "input");
  expect_error(e, R"({"input": ""})", 400, "input");
  expect_error(e, R"({"input": []})", 400, "input");
  expect_error(e, R"({"input": [[]]})", 400, "input");
  expect_error(e, R"({"input": 5})", 400, "input");
  expect_error(e, R"({"input": ["a", 5]})", 400, "input");
  expect_error(e, R"({"input": [1, -2]})", 400, "input");
  expect_error(e, R"({"input": [1, 99999999]})", 400, "input");
  expect_error(e, R"({"input": "a", "encoding_format": "hex"})", 400, "encoding_format");
  expect_error(e, R"({"input": "a", "dimensions": 3})", 400, "dimensions");
  expect_error(e, json{{"input", std::string(4000, 'a')}}.dump(), 400, "input");  // over the longest input
  expect_error(e, json{{"input", std::vector<std::string>(2049, "a")}}.dump(), 400, "input");
  auto r = client_->Get(e.c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(embed("still serving").size(), 1u);
}

}  // namespace
}  // namespace kestrel
