// The OpenAI-compatible HTTP front end (cpp-httplib): /v1/completions and /v1/chat/completions (JSON or
// SSE streams), /v1/models, /health, /ready and /metrics. HTTP threads parse and validate, tokenize, hand
// requests to the EngineLoop and turn its outputs into responses; they never touch the engine.
//
// Errors are OpenAI error objects: 400 for malformed JSON, wrong types, out-of-range values, invalid UTF-8
// and oversized bodies; 401 for a missing or wrong API key; 404 for unknown routes; 503 with Retry-After
// when the request queue is full or the server is shutting down. A streaming client that disconnects
// cancels its request.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kestrel {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see HttpServer::port)
  std::string api_key;              // empty: no authentication
  std::string model_name = "kestrel";
  size_t max_body_bytes = 1 << 20;  // larger request bodies get a 400
  int http_threads = 160;           // concurrent connections served (each stream holds one)
};

// Renders chat messages to the prompt text (the model's chat template), or says why it cannot.
using ChatRenderer = std::function<Result<std::string>(const std::vector<ChatMessage>&)>;

class HttpServer {
 public:
  HttpServer(EngineLoop& loop, const Tokenizer& tokenizer, ChatRenderer render_chat, Metrics& metrics,
             const ServerConfig& config, int32_t max_seq_len);
  ~HttpServer();

  // Binds the address and serves on a background thread; error when the address cannot be bound.
  Status start();
  // Stops accepting connections and waits for the handlers in flight.
  void stop();
  int port() const { return port_; }
  void set_ready(bool ready) { ready_.store(ready); }
  // New completion requests get 503 (shutdown in progress); requests in flight continue.
  void refuse_new_requests() { refusing_.store(true); }

 private:
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  bool authorized(const httplib::Request& req) const;

  EngineLoop& loop_;
  const Tokenizer& tokenizer_;
  ChatRenderer render_chat_;
  Metrics& metrics_;
  ServerConfig config_;
  int32_t max_seq_len_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> ready_{false}, refusing_{false};
};

}  // namespace kestrel
