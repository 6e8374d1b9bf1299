// The OpenAI-compatible HTTP front end (cpp-httplib): /v1/completions and /v1/chat/completions (JSON or
// SSE streams), /v1/embeddings, /v1/models, /health, /ready and /metrics. HTTP threads parse and validate, tokenize, hand
// requests to the EngineLoop and turn its outputs into responses; they never touch the engine.
//
// Errors are OpenAI error objects: 400 for malformed JSON, wrong types, out-of-range values, invalid UTF-8
// and parameters kestrel does not implement; 401 for a missing or wrong API key; 403 for a browser request
// the WebPolicy refuses; 404 for unknown routes; 405 (with Allow) for a wrong method; 413 for a body over
// --max-body (however it is framed); 414/431 for an oversized request line/header section; 415 for a
// body that is not JSON; 503 with Retry-After when the server is at capacity or shutting down. A client
// that disconnects, streaming or not, cancels its request (logged as 499).
//
// Admission is bounded end to end: at most max_in_flight() completion requests are held (queued in the
// engine or running) and each holds one connection thread; connection threads beyond those
// (ServerConfig::reserved_threads) stay free for refusals and /health, /ready, /metrics, and idle
// keep-alive connections are closed when threads run short (HttpListener).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/status.h"
#include "server/grammar_cache.h"
#include "server/http_listener.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "server/request_queue.h"
#include "server/web_policy.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see HttpServer::port)
  std::string api_key;              // empty: no authentication
  std::string cors_origin;          // browser origin allowed to call the API ("*": any); see WebPolicy
  std::string model_name = "kestrel";
  ToolCallFormat tool_call_format = ToolCallFormat::None;  // the chat template's (tool calling)
  size_t max_body_bytes = 1 << 20;  // larger request bodies get a 413
  size_t max_request_line_bytes = 8 * 1024;  // 414 beyond
  size_t max_header_bytes = 64 * 1024;       // 431 beyond (request line and headers together)
  int http_threads = 0;             // connection threads; 0: the engine loop's queue limit + reserved_threads
  int reserved_threads = 32;        // threads never held by completions (refusals, health, metrics)
};

// Renders chat messages (and the tools offered, null for none) to the prompt text with the model's chat
// template, or says why it cannot.
using ChatRenderer = std::function<Result<std::string>(const std::vector<ChatMessage>&, const nlohmann::ordered_json& tools)>;

class HttpServer {
 public:
  HttpServer(RequestQueue& loop, const Tokenizer& tokenizer, ChatRenderer render_chat, Metrics& metrics,
             const ServerConfig& config, int32_t max_seq_len);
  ~HttpServer();

  // Answer /v1/embeddings through `queue` (vectors of n_embd; inputs of at most max_input_tokens tokens).
  // Without it the route says the server computes none. Call before start().
  void serve_embeddings(EmbeddingQueue* queue, int32_t n_embd, int32_t max_input_tokens) {
    embeddings_ = queue;
    n_embd_ = n_embd;
    max_embedding_tokens_ = max_input_tokens;
  }
  // Binds the address and serves on a background thread; error when the address cannot be bound.
  Status start();
  // Stops accepting connections and waits for the handlers in flight.
  void stop();
  int port() const { return port_; }
  void set_ready(bool ready) { ready_.store(ready); }
  // New completion requests get 503 (shutdown in progress); requests in flight continue.
  void refuse_new_requests() { refusing_.store(true); }
  // Most completion requests held at once, and how many are held now (admitted, not yet fully answered).
  int max_in_flight() const { return max_in_flight_; }
  int n_in_flight() const { return n_in_flight_.load(); }

 private:
  struct InFlightSlot;
  // Admission and the body, common to the POST routes: the request's slot among max_in_flight(), or null
  // when the request was answered here (busy, shutting down, not JSON, body too large or unreadable).
  std::shared_ptr<InFlightSlot> admit(const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader, const std::string& endpoint, std::string& body);
  void handle_completion(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                         bool chat);
  void handle_embeddings(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  // The request's prompt tokens, or the error to answer with.
  std::variant<std::vector<int32_t>, ApiError> prompt_tokens(const CompletionParams& params) const;
  bool authorized(const httplib::Request& req) const;
  // Checks that apply to every route before it runs (CORS, Host/Origin, method, API key); true when the
  // request was answered here.
  bool screen(const httplib::Request& req, httplib::Response& res) const;

  RequestQueue& loop_;
  EmbeddingQueue* embeddings_ = nullptr;
  int32_t n_embd_ = 0, max_embedding_tokens_ = 0;
  const Tokenizer& tokenizer_;
  GrammarCache grammars_;  // requests' grammars over this vocabulary
  ChatRenderer render_chat_;
  Metrics& metrics_;
  ServerConfig config_;
  int32_t max_seq_len_;
  WebPolicy web_policy_;
  int max_in_flight_;
  std::unique_ptr<HttpListener> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> ready_{false}, refusing_{false};
  std::atomic<int> n_in_flight_{0};  // completion requests admitted and not answered
};

}  // namespace kestrel
