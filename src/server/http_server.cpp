#include "server/http_server.h"

#include <strings.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/timer.h"
#include "server/completion_response.h"
#include "server/embedding_response.h"
#include "tokenizer/chat_prompt.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(dump(error_body(error)), "application/json");
}

// Equal-length keys compared without an early exit, so timing does not tell how much of a guess was right.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The routes and the methods each takes (a known path with another method gets 405 and Allow).
struct Route {
  const char* path;
  const char* allow;
};
constexpr Route kRoutes[] = {{"/health", "GET, HEAD"}, {"/ready", "GET, HEAD"},      {"/metrics", "GET, HEAD"},
                             {"/v1/models", "GET, HEAD"}, {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
                             {"/v1/embeddings", "POST"}};
const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}
bool method_allowed(const Route& route, const std::string& method) {
  const std::string allow = route.allow;
  return allow.find(method) != std::string::npos && method != "OPTIONS";
}

}  // namespace

HttpServer::HttpServer(RequestQueue& loop, const Tokenizer& tokenizer, ChatRenderer render_chat, Metrics& metrics,
                       const ServerConfig& config, int32_t max_seq_len)
    : loop_(loop),
      tokenizer_(tokenizer),
      grammars_(tokenizer),
      render_chat_(std::move(render_chat)),
      metrics_(metrics),
      config_(config),
      max_seq_len_(max_seq_len),
      web_policy_{config.host, config.cors_origin, !config.api_key.empty()} {
  const int reserved = std::max(1, config_.reserved_threads);
  if (config_.http_threads <= 0)
    config_.http_threads = static_cast<int>(std::min<size_t>(loop.max_pending(), 4096)) + reserved;
  // Every admitted completion holds a connection thread; the reserve stays free for everything else.
  max_in_flight_ = std::max(1, std::min(static_cast<int>(std::min<size_t>(loop.max_pending(), 1 << 20)),
                                        config_.http_threads - reserved));
  ListenerLimits limits;
  limits.max_request_line_bytes = config_.max_request_line_bytes;
  limits.max_header_bytes = config_.max_header_bytes;
  limits.max_body_bytes = config_.max_body_bytes;
  limits.n_threads = config_.http_threads;
  limits.n_reserved_threads = reserved;
  http_ = std::make_unique<HttpListener>(limits);
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::authorized(const httplib::Request& req) const {
  if (config_.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string scheme = "bearer ";  // RFC 7235: the scheme is case-insensitive
  const bool bearer = header.size() >= scheme.size() && ::strncasecmp(header.c_str(), scheme.c_str(), scheme.size()) == 0;
  std::string given = bearer ? header.substr(scheme.size()) : "";
  given.erase(0, given.find_first_not_of(' '));
  return constant_time_equal(given, config_.api_key);
}

bool HttpServer::screen(const httplib::Request& req, httplib::Response& res) const {
  const std::string origin = req.get_header_value("Origin");
  if (const std::string allowed = allowed_cors_origin(web_policy_, origin); !allowed.empty()) {
    res.set_header("Access-Control-Allow-Origin", allowed);
    if (allowed != "*") res.set_header("Vary", "Origin");
  }
  if (auto why = refuse_reason(web_policy_, req.get_header_value("Host"), origin)) {
    send_error(res, ApiError{403, *why, "permission_error", ""});
    return true;
  }
  const Route* route = find_route(req.path);
  if (req.method == "OPTIONS") {  // a CORS preflight (allowed origins only got this far)
    res.status = route ? 204 : 404;
    if (route) {
      res.set_header("Allow", std::string(route->allow) + ", OPTIONS");
      res.set_header("Access-Control-Allow-Methods", std::string(route->allow) + ", OPTIONS");
      const std::string wanted = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", wanted.empty() ? "Authorization, Content-Type" : wanted);
      res.set_header("Access-Control-Max-Age", "600");
    }
    return true;
  }
  if (route && !method_allowed(*route, req.method)) {
    res.set_header("Allow", route->allow);
    send_error(res, ApiError{405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + route->allow + ")",
                             "invalid_request_error", ""});
    return true;
  }
  if (req.path == "/health" || req.path == "/ready" || authorized(req)) return false;
  send_error(res, ApiError{401, "a valid API key is required (Authorization: Bearer ...)", "authentication_error", ""});
  return true;
}

Status HttpServer::start() {
  HttpListener& s = *http_;
  const int n_threads = config_.http_threads;
  s.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "", "invalid_request_error", ""};
    if (res.status == 413) e.message = "the request body is too large (--max-body)";
    else if (res.status == 404) e.message = "no such route";
    else e.message = "request failed";
    send_error(res, e);
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return screen(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = ready_.load() && !refusing_.load();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? R"({"status":"ready"})" : R"({"status":"unavailable"})", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", config_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "kestrel"},
                        {"max_model_len", max_seq_len_}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_completion(req, res, reader, false);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_completion(req, res, reader, true);
  });
  s.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_embeddings(req, res, reader);
  });

  // cpp-httplib listens with a backlog of 5, which drops connections when a burst of clients connects at
  // once: remember the listening socket and raise its backlog after the bind (listen() again updates it).
  int listen_fd = -1;
  s.set_socket_options([&listen_fd](int fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = fd;
  });
  port_ = config_.port == 0 ? s.bind_to_any_port(config_.host) : (s.bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port_ <= 0) return Error{"cannot listen on " + config_.host + ":" + std::to_string(config_.port)};
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return {};
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  http_->stop();
  thread_.join();
}

std::variant<std::vector<int32_t>, ApiError> HttpServer::prompt_tokens(const CompletionParams& params) const {
  std::optional<std::vector<int32_t>> tokens;
  // Tokenising stops once the prompt is longer than a sequence may be: a huge prompt costs no more than
  // that many tokens.
  const size_t max_tokens = static_cast<size_t>(max_seq_len_);
  if (params.chat) {
    const bool offer_tools = params.tool_choice != "none";
    auto text = render_chat_(params.messages, offer_tools ? params.tools : nlohmann::ordered_json(nullptr));
    if (!text.ok()) return ApiError{400, text.error(), "invalid_request_error", "messages"};
    tokens = encode_chat_prompt(tokenizer_, *text, max_tokens);
  } else if (params.prompt_is_tokens) {
    tokens = params.prompt_tokens;
  } else {
    tokens = tokenizer_.encode(params.prompt_text, true, /*parse_special=*/true, max_tokens);
  }
  if (!tokens || tokens->size() >= max_tokens)
    return ApiError{400, "the prompt is longer than this server's context of " + std::to_string(max_seq_len_) + " tokens",
                    "invalid_request_error", params.chat ? "messages" : "prompt"};
  return std::move(*tokens);
}

// Held by a handler (and by a stream's provider until the stream ends) while its request is admitted.
struct HttpServer::InFlightSlot {
  explicit InFlightSlot(std::atomic<int>& count) : n(count) {}
  InFlightSlot(const InFlightSlot&) = delete;
  ~InFlightSlot() { n.fetch_sub(1); }
  std::atomic<int>& n;
};

std::shared_ptr<HttpServer::InFlightSlot> HttpServer::admit(const httplib::Request& req, httplib::Response& res,
                                                            const httplib::ContentReader& reader, const std::string& endpoint,
                                                            std::string& body) {
  auto fail = [&](const ApiError& e) {
    send_error(res, e);
    metrics_.request_finished(endpoint, e.status);
    return nullptr;
  };
  auto busy = [&](const char* message) {
    res.set_header("Retry-After", "1");
    return fail(ApiError{503, message, "server_overloaded", ""});
  };
  // Refusals that need no body come first, so they cost nothing; the unread body closes the connection.
  if (is_form_content(req.get_header_value("Content-Type"))) {
    http_->close_after(req);
    return fail(ApiError{415, "the request body must be JSON (Content-Type: application/json), not a form",
                         "invalid_request_error", ""});
  }
  if (refusing_.load()) {
    http_->close_after(req);
    return busy("the server is shutting down");
  }
  // Admission: a slot among max_in_flight_, held until the slot is released.
  if (n_in_flight_.fetch_add(1) >= max_in_flight_) {
    n_in_flight_.fetch_sub(1);
    http_->close_after(req);
    return busy("the server is busy: too many requests in flight");
  }
  auto slot = std::make_shared<InFlightSlot>(n_in_flight_);
  switch (http_->read_body(reader, body)) {
    case BodyStatus::Ok: return slot;
    case BodyStatus::Failed:
      if (res.status != 413) {  // (httplib sets 413 for a Content-Length over the limit)
        http_->close_after(req);
        return fail(ApiError{400, "the request body could not be read", "invalid_request_error", ""});
      }
      [[fallthrough]];
    case BodyStatus::TooLarge:
      http_->close_after(req);
      return fail(ApiError{413, "the request body is larger than " + std::to_string(config_.max_body_bytes) +
                                    " bytes (--max-body)", "invalid_request_error", ""});
  }
  return nullptr;
}

void HttpServer::handle_embeddings(const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) {
  const std::string endpoint = "/v1/embeddings";
  auto fail = [&](const ApiError& e) {
    send_error(res, e);
    metrics_.request_finished(endpoint, e.status);
  };
  std::string body;
  const std::shared_ptr<InFlightSlot> slot = admit(req, res, reader, endpoint, body);
  if (!slot) return;
  auto parsed = parse_embedding_request(body);
  body = std::string();
  if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e);
  const EmbeddingParams& params = std::get<EmbeddingParams>(parsed);
  if (!embeddings_)
    return fail(ApiError{400, "this server computes no embeddings (the model is split over processes)",
                         "invalid_request_error", ""});
  if (params.dimensions != 0 && params.dimensions != n_embd_)
    return fail(ApiError{400, "'dimensions' must be this model's embedding width, " + std::to_string(n_embd_),
                         "invalid_request_error", "dimensions"});
  auto job = std::make_shared<EmbeddingJob>();
  int64_t n_tokens = 0;
  const size_t max_tokens = static_cast<size_t>(max_embedding_tokens_);
  for (size_t i = 0; i < params.inputs.size(); ++i) {
    const auto& in = params.inputs[i];
    std::vector<int32_t> ids = std::holds_alternative<std::string>(in)
                                   ? tokenizer_.encode(std::get<std::string>(in), true, /*parse_special=*/false, max_tokens + 1)
                                         .value_or(std::vector<int32_t>(max_tokens + 1))
                                   : std::get<std::vector<int32_t>>(in);
    const std::string which = params.inputs.size() > 1 ? "input " + std::to_string(i) + " " : "the input ";
    if (ids.size() > max_tokens)
      return fail(ApiError{400, which + "is longer than " + std::to_string(max_tokens) + " tokens", "invalid_request_error", "input"});
    for (int32_t t : ids)
      if (t >= tokenizer_.vocab().n_tokens())
        return fail(ApiError{400, which + "holds token id " + std::to_string(t) + ", outside the vocabulary",
                             "invalid_request_error", "input"});
    n_tokens += static_cast<int64_t>(ids.size());
    job->inputs.push_back(std::move(ids));
  }
  auto vectors = job->vectors.get_future();
  if (!embeddings_->submit_embeddings(job)) {
    res.set_header("Retry-After", "1");
    return fail(ApiError{503, refusing_.load() ? "the server is shutting down" : "the server is busy: too many requests queued",
                         "server_overloaded", ""});
  }
  auto result = vectors.get();
  if (!result.ok()) return fail(ApiError{400, result.error(), "invalid_request_error", "input"});
  res.set_content(dump(embedding_response(*result, params.base64, config_.model_name, n_tokens)), "application/json");
  metrics_.request_finished(endpoint, 200);
}

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  const Timer timer;
  auto fail = [&](const ApiError& e) {
    send_error(res, e);
    metrics_.request_finished(endpoint, e.status);
  };
  auto busy = [&](const char* message) {
    res.set_header("Retry-After", "1");
    fail(ApiError{503, message, "server_overloaded", ""});
  };
  std::string body;
  const std::shared_ptr<InFlightSlot> slot = admit(req, res, reader, endpoint, body);
  if (!slot) return;
  auto parsed = parse_completion_request(body, chat);
  body = std::string();
  if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e);
  auto params = std::make_shared<CompletionParams>(std::move(std::get<CompletionParams>(parsed)));

  Request request;
  auto prompt = prompt_tokens(*params);
  if (auto* e = std::get_if<ApiError>(&prompt)) return fail(*e);
  request.prompt = std::move(std::get<std::vector<int32_t>>(prompt));
  request.max_tokens = params->max_tokens > 0 ? params->max_tokens : max_seq_len_;
  request.sampling = params->sampling;
  const bool tool_calling = params->chat && !params->tools.is_null() && params->tool_choice != "none";
  if (tool_calling && config_.tool_call_format == ToolCallFormat::None)
    return fail(ApiError{400, "this model's chat template has no tool-call format (it does not render tools)",
                         "invalid_request_error", "tools"});
  if (tool_calling && (params->tool_choice == "required" || params->tool_choice == "function")) {
    auto forced = tool_call_grammar(config_.tool_call_format, params->tools, params->tool_choice_name);
    if (!forced.ok()) return fail(ApiError{400, forced.error(), "invalid_request_error", "tools"});
    params->grammar = std::move(forced).value();
  }
  if (!params->grammar.empty()) {
    auto grammar = grammars_.get(params->grammar);
    if (!grammar.ok()) return fail(ApiError{400, grammar.error(), "invalid_request_error", "grammar"});
    request.sampling.grammar = std::move(grammar).value();
  }
  if (!params->seeded) request.sampling.seed = std::random_device{}();
  request.n = std::max(params->n, params->best_of);
  // best_of ranks choices by their tokens' logprobs, so the engine computes them even when not returned.
  request.top_logprobs = params->best_of > params->n ? std::max(params->logprobs, 0) : params->logprobs;
  request.cache_salt = params->cache_salt;
  request.stop_tokens = params->stop_token_ids;
  if (!params->ignore_eos)
    for (int32_t id : {tokenizer_.vocab().eos, tokenizer_.vocab().eot})
      if (id >= 0) request.stop_tokens.push_back(id);

  auto channel = std::make_shared<RequestChannel>();
  if (!loop_.submit(std::move(request), channel))
    return busy(refusing_.load() ? "the server is shutting down" : "the server is busy: too many requests queued");
  // Wait until the engine thread accepted or refused the request.
  std::optional<ChannelEvent> first;
  while (!(first = channel->pop(std::chrono::milliseconds(200)))) {}
  if (first->kind == ChannelEvent::Kind::ShuttingDown) return busy(first->error.c_str());
  if (first->kind == ChannelEvent::Kind::Rejected) return fail(ApiError{400, first->error, "invalid_request_error", ""});

  auto response = std::make_shared<CompletionResponse>(
      *params, tokenizer_, config_.model_name, tool_calling ? config_.tool_call_format : ToolCallFormat::None);
  // Per-request timing for the TTFT / TPOT histograms.
  struct Timing {
    double first_token_s = -1, last_token_s = 0;
  };
  auto timing = std::make_shared<Timing>();
  auto note_tokens = [timing, timer](const StepOutput& out) {
    if (out.tokens.empty()) return;
    const double now = timer.elapsed_s();
    if (timing->first_token_s < 0) timing->first_token_s = now;
    timing->last_token_s = now;
  };
  auto record = [this, timing, timer, response, endpoint](int status) {
    const int32_t n = response->n_generated();
    const double tpot = n > 1 ? (timing->last_token_s - timing->first_token_s) / (n - 1) : 0;
    metrics_.request_timing(timing->first_token_s, tpot, timer.elapsed_s(), n);
    metrics_.request_finished(endpoint, status);
  };
  const ApiError cut_off{503, "the server shut down before the request finished (finish_reason \"abort\")",
                         "server_shutdown", ""};

  if (!params->stream) {
    while (!response->done()) {
      // The client may leave while it waits: then the work is cancelled, as for a stream.
      if (http_->client_gone(req)) {
        loop_.cancel(channel);
        return record(499);
      }
      const auto event = channel->pop(std::chrono::milliseconds(100));
      if (!event) continue;
      note_tokens(event->output);
      response->consume(event->output);
      if (!response->done() && response->all_stopped_by_text()) loop_.cancel(channel);
    }
    loop_.cancel(channel);  // ends choices cut by stop strings; a no-op when the engine already finished them
    if (response->aborted()) {
      send_error(res, cut_off);
      return record(cut_off.status);
    }
    res.set_content(dump(response->full_response()), "application/json");
    record(200);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  auto opened = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, params, channel, response, opened, note_tokens, cut_off](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) {
          const std::string line = "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        if (!*opened) {
          *opened = true;
          if (params->chat && !send(response->first_chat_chunks())) return false;
        }
        const auto event = channel->pop(std::chrono::milliseconds(1000));
        if (!event) {
          static const std::string keepalive = ": keep-alive\n\n";  // also notices a client that left
          return sink.write(keepalive.data(), keepalive.size());
        }
        note_tokens(event->output);
        for (const json& chunk : response->consume(event->output))
          if (!send(chunk)) return false;
        if (!response->done() && response->all_stopped_by_text()) loop_.cancel(channel);
        if (response->done()) {
          loop_.cancel(channel);  // no-op when the engine already finished it
          // A choice cut off by shutdown ended with finish_reason "abort"; the error event makes clients
          // (the openai SDKs among them) raise instead of taking the text as complete.
          if (response->aborted() && !send(error_body(cut_off))) return false;
          if (params->include_usage && !send(response->usage_chunk())) return false;
          static const std::string done = "data: [DONE]\n\n";
          if (!sink.write(done.data(), done.size())) return false;
          sink.done();
        }
        return true;
      },
      [this, channel, record, response, cut_off, slot](bool success) {
        if (!success) loop_.cancel(channel);  // the client went away: free its blocks
        record(!success ? 499 : response->aborted() ? cut_off.status : 200);
      });
}

}  // namespace kestrel
