// The HTTP server end to end on stories260K: OpenAI routes (JSON and SSE), bad input answered with 400 and
// an error object while the server keeps serving, API keys, 503 when the queue is full, and clients that
// disconnect mid-stream leaving no KV blocks in use.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "server_fixture.h"

namespace kestrel {
namespace {

TEST_F(ServerTest, CompletionsChatModelsHealthAndMetrics) {
  start();
  auto r = client_->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(client_->Get("/ready")->status, 200);
  const json models = json::parse(client_->Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["object"], "model");

  r = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text.rfind(", there was a little girl named Lily", 0), 0u) << text;  // as llama2.c's greedy output
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  // The same request streamed: the chunks add up to the same text, then usage, then [DONE].
  r = post("/v1/completions",
           R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stream": true,
               "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::string streamed;
  bool saw_usage = false, saw_done = false;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    if (line == "data: [DONE]") {
      saw_done = true;
      continue;
    }
    const json c = json::parse(line.substr(6));
    if (c.contains("usage")) saw_usage = c["usage"]["completion_tokens"] == 12;
    else streamed += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  EXPECT_TRUE(saw_usage);
  EXPECT_TRUE(saw_done);

  r = post("/v1/chat/completions",
           R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
               "max_tokens": 6, "logprobs": true, "top_logprobs": 2, "seed": 3})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 6u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);

  // Stop strings end the text before them.
  r = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": ["Lily"]})");
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], ", there was a little girl named ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  const std::string metrics = client_->Get("/metrics")->body;
  for (const char* name : {"kestrel_requests_total{endpoint=\"/v1/completions\",status=\"200\"}",
                           "kestrel_time_to_first_token_seconds_bucket", "kestrel_time_per_output_token_seconds_count",
                           "kestrel_kv_blocks{state=\"free\"}", "kestrel_prefix_cache_hit_tokens_total",
                           "kestrel_requests_waiting", "kestrel_preemptions_total"})
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServerTest, BadInputGetsA400AndTheServerKeepsServing) {
  start();
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  expect_error(c, "{not json", 400);
  expect_error(c, "[1, 2]", 400);
  expect_error(c, "{\"prompt\": \"\xff\xfe\"}", 400);  // invalid UTF-8
  expect_error(c, "{}", 400, "prompt");
  expect_error(c, R"({"prompt": 5})", 400, "prompt");
  expect_error(c, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature");
  expect_error(c, R"({"prompt": "x", "temperature": 7})", 400, "temperature");
  expect_error(c, R"({"prompt": "x", "top_p": 0})", 400, "top_p");
  expect_error(c, R"({"prompt": "x", "top_k": 1.5})", 400, "top_k");
  expect_error(c, R"({"prompt": "x", "min_p": -1})", 400, "min_p");
  expect_error(c, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens");
  expect_error(c, R"({"prompt": "x", "max_tokens": "9"})", 400, "max_tokens");
  expect_error(c, R"({"prompt": "x", "n": 99})", 400, "n");
  expect_error(c, R"({"prompt": "x", "presence_penalty": 3})", 400, "presence_penalty");
  expect_error(c, R"({"prompt": "x", "frequency_penalty": -2.5})", 400, "frequency_penalty");
  expect_error(c, R"({"prompt": "x", "repetition_penalty": 0})", 400, "repetition_penalty");
  expect_error(c, R"({"prompt": "x", "stop": [1]})", 400, "stop");
  expect_error(c, R"({"prompt": "x", "stop": ""})", 400, "stop");
  expect_error(c, R"({"prompt": "x", "logprobs": 50})", 400, "logprobs");
  expect_error(c, R"({"prompt": "x", "seed": "s"})", 400, "seed");
  expect_error(c, R"({"prompt": "x", "stream": "yes"})", 400, "stream");
  expect_error(c, R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options");
  expect_error(c, R"({"prompt": "x", "ignore_eos": 1})", 400, "ignore_eos");
  expect_error(c, R"({"prompt": [1, -4]})", 400, "prompt");
  expect_error(c, R"({"prompt": [1, 99999999]})", 400);  // outside the vocabulary
  expect_error(c, "{\"prompt\": \"" + std::string(70 * 1024, 'a') + "\"}", 413);  // body too large
  expect_error(chat, R"({"messages": []})", 400, "messages");
  expect_error(chat, R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages");
  expect_error(chat, R"({"messages": [{"role": "user", "content": 3}]})", 400, "messages");
  expect_error(chat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "top_logprobs");
  expect_error("/v1/unknown", "{}", 404);
  // Still serving.
  auto r = post(c, R"({"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServerTest, ApiKeyIsRequiredOnApiRoutes) {
  start(64, "sekrit-key");
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", 401);
  auto r = post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", {{"Authorization", "Bearer sekrit-kez"}});
  EXPECT_EQ(r->status, 401);
  r = post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", {{"Authorization", "Bearer sekrit-key"}});
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(ServerTest, FullQueueAnswers503WithRetryAfter) {
  start(/*max_pending=*/2);
  std::atomic<int> ok{0}, busy{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(60, 0);
      auto r = c.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true})",
                      "application/json");
      if (r && r->status == 200) ++ok;
      if (r && r->status == 503 && r->get_header_value("Retry-After") == "1") ++busy;
    });
  for (auto& t : clients) t.join();
  EXPECT_GE(ok.load(), 2);
  EXPECT_GE(busy.load(), 1);
  EXPECT_EQ(ok + busy, 8);
  EXPECT_TRUE(wait_idle());
}

// Sends a streaming request on a raw socket, reads until the first data chunk, then hangs up.
bool stream_and_disconnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool got_data = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true, "stream": true})";
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string seen;
      char buf[4096];
      timeval tv{30, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      for (ssize_t n; !got_data && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        seen.append(buf, static_cast<size_t>(n));
        got_data = seen.find("data: {") != std::string::npos;
      }
    }
  }
  ::close(fd);
  return got_data;
}

TEST_F(ServerTest, HundredClientsDisconnectingMidStreamLeaveNoBlocksInUse) {
  start(/*max_pending=*/200);
  std::atomic<int> streamed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 100; ++i)
    clients.emplace_back([&] { streamed += stream_and_disconnect(server_->port()); });
  for (auto& t : clients) t.join();
  EXPECT_EQ(streamed.load(), 100);
  EXPECT_TRUE(wait_idle());  // every cancelled request released its blocks
  EXPECT_EQ(loop_->stats().kv_blocks_used, 0);
  // And the server still answers.
  auto r = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// kestrel bench serve against this server: no errors, every request's tokens, the prefix cache seen.
TEST_F(ServerTest, BenchServeDrivesTheServer) {
  start();
  std::string out;
  const std::string cmd = std::string(KESTREL_BINARY) + " bench serve --url http://127.0.0.1:" +
                          std::to_string(server_->port()) +
                          " --requests 12 --concurrency 4 --prefix-tokens 40 --unique-tokens 5 --max-tokens 8"
                          " --min-tokens 4 --vocab 500 -o json 2>&1";
  ASSERT_EQ(test::run_command(cmd, out), 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["errors"], 0);
  EXPECT_GE(r["output_tokens"].get<int>(), 12 * 4);
  EXPECT_LE(r["output_tokens"].get<int>(), 12 * 8);
  EXPECT_GT(r["output_tok_s"].get<double>(), 0);
  EXPECT_GT(r["prefix_cache_hit_rate"].get<double>(), 0.5);
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServerTest, ShutdownRefusesNewRequestsWhileInFlightOnesFinish) {
  start();
  std::thread slow([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    auto r = c.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 100, "ignore_eos": true})", "application/json");
    EXPECT_TRUE(r && r->status == 200);
    if (r) {
      EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 100);
    }
  });
  while (loop_->n_pending() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->refuse_new_requests();
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", 503);
  EXPECT_EQ(client_->Get("/ready")->status, 503);
  slow.join();
  EXPECT_TRUE(wait_idle());
}

}  // namespace
}  // namespace kestrel
