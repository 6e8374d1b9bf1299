#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <random>

#include "core/timer.h"
#include "server/completion_response.h"

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

}  // namespace

HttpServer::HttpServer(EngineLoop& loop, const Tokenizer& tokenizer, ChatRenderer render_chat, Metrics& metrics,
                       const ServerConfig& config, int32_t max_seq_len)
    : loop_(loop),
      tokenizer_(tokenizer),
      render_chat_(std::move(render_chat)),
      metrics_(metrics),
      config_(config),
      max_seq_len_(max_seq_len),
      http_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::authorized(const httplib::Request& req) const {
  if (config_.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  const std::string given = header.compare(0, prefix.size(), prefix) == 0 ? header.substr(prefix.size()) : "";
  return constant_time_equal(given, config_.api_key);
}

Status HttpServer::start() {
  httplib::Server& s = *http_;
  const int n_threads = config_.http_threads;
  s.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s.set_payload_max_length(config_.max_body_bytes);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "", "invalid_request_error", ""};
    if (res.status == 413) {
      e = ApiError{400, "the request body is too large", "invalid_request_error", ""};
    } else if (res.status == 404) {
      e.message = "no such route";
    } else {
      e.message = "request failed";
    }
    send_error(res, e);
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || req.path == "/ready" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{401, "a valid API key is required (Authorization: Bearer ...)", "authentication_error", ""});
    return httplib::Server::HandlerResponse::Handled;
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
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, false); });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, true); });

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

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  const Timer timer;
  auto fail = [&](const ApiError& e) {
    send_error(res, e);
    metrics_.request_finished(endpoint, e.status);
  };
  auto parsed = parse_completion_request(req.body, chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e);
  auto params = std::make_shared<CompletionParams>(std::move(std::get<CompletionParams>(parsed)));

  Request request;
  if (chat) {
    auto text = render_chat_(params->messages);
    if (!text.ok()) return fail(ApiError{400, text.error(), "invalid_request_error", "messages"});
    const std::string bos = tokenizer_.vocab().bos >= 0 ? tokenizer_.token_to_piece(tokenizer_.vocab().bos, true) : "";
    const bool has_bos = !bos.empty() && text->compare(0, bos.size(), bos) == 0;
    request.prompt = tokenizer_.encode(*text, !has_bos, /*parse_special=*/true);
  } else if (params->prompt_is_tokens) {
    request.prompt = params->prompt_tokens;
  } else {
    request.prompt = tokenizer_.encode(params->prompt_text, true, /*parse_special=*/true);
  }
  request.max_tokens = params->max_tokens > 0 ? params->max_tokens : max_seq_len_;
  request.sampling = params->sampling;
  if (!params->seeded) request.sampling.seed = std::random_device{}();
  request.n = params->n;
  request.top_logprobs = params->logprobs;
  request.cache_salt = params->cache_salt;
  request.stop_tokens = params->stop_token_ids;
  if (!params->ignore_eos)
    for (int32_t id : {tokenizer_.vocab().eos, tokenizer_.vocab().eot})
      if (id >= 0) request.stop_tokens.push_back(id);

  auto channel = std::make_shared<RequestChannel>();
  if (refusing_.load() || !loop_.submit(std::move(request), channel)) {
    res.set_header("Retry-After", "1");
    return fail(ApiError{503, refusing_.load() ? "the server is shutting down" : "the server is busy: too many requests queued",
                         "server_overloaded", ""});
  }
  // Wait until the engine thread accepted or refused the request.
  std::optional<ChannelEvent> first;
  while (!(first = channel->pop(std::chrono::milliseconds(200)))) {}
  if (first->kind == ChannelEvent::Kind::Rejected) return fail(ApiError{400, first->error, "invalid_request_error", ""});

  auto response = std::make_shared<CompletionResponse>(*params, tokenizer_, config_.model_name);
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

  if (!params->stream) {
    while (!response->done()) {
      const auto event = channel->pop(std::chrono::milliseconds(1000));
      if (!event) continue;
      note_tokens(event->output);
      response->consume(event->output);
      if (!response->done() && response->all_stopped_by_text()) loop_.cancel(channel);
    }
    loop_.cancel(channel);  // ends choices cut by stop strings; a no-op when the engine already finished them
    res.set_content(dump(response->full_response()), "application/json");
    record(200);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  auto opened = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, params, channel, response, opened, note_tokens](size_t, httplib::DataSink& sink) {
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
          if (params->include_usage && !send(response->usage_chunk())) return false;
          static const std::string done = "data: [DONE]\n\n";
          if (!sink.write(done.data(), done.size())) return false;
          sink.done();
        }
        return true;
      },
      [this, channel, record](bool success) {
        if (!success) loop_.cancel(channel);  // the client went away: free its blocks
        record(success ? 200 : 499);
      });
}

}  // namespace kestrel
