// The connection layer under the HTTP routes: cpp-httplib's Server with its per-connection loop replaced,
// so that what one client can make the server hold is bounded and a handler can tell that its client left.
//
// - Request heads: a request line over max_request_line_bytes gets 414, a header section over
//   max_header_bytes gets 431, both without reading (or holding) more than the limit. The raw bytes of a
//   request body are bounded too (2 x max_body_bytes + 64 KiB: room for any sane chunked framing); a
//   handler holds the decoded body to max_body_bytes itself (read_body).
// - Keep-alive: a connection waits for its next request only while fewer than
//   n_threads - n_reserved_threads connections are open; beyond that it is closed after its response, so
//   idle clients cannot hold the threads a burst needs.
// - client_gone(req): true once the client that sent req closed its connection (a handler polls this while
//   it waits for the engine, and cancels the work).
//
// Contract: the handlers registered on this server run on its connection threads; client_gone and
// close_after may be called from a handler with the request it was given.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kestrel {

struct ListenerLimits {
  size_t max_request_line_bytes = 8 * 1024;
  size_t max_header_bytes = 64 * 1024;  // the whole head: request line and headers
  size_t max_body_bytes = 1 << 20;
  int n_threads = 160;                  // connection threads
  int n_reserved_threads = 32;          // kept free of idle keep-alive connections
  int keep_alive_timeout_s = 5;
  int read_timeout_s = 5, write_timeout_s = 5;
};

// What read_body found.
enum class BodyStatus { Ok, TooLarge, Failed };

class HttpListener : public httplib::Server {
 public:
  explicit HttpListener(const ListenerLimits& limits);

  // True once the client of req closed its connection (or the connection failed).
  bool client_gone(const httplib::Request& req) const;
  // Closes req's connection after its response instead of keeping it alive (the body was not read).
  void close_after(const httplib::Request& req);
  // Reads the request body through the content reader into body, at most max_body_bytes of it.
  BodyStatus read_body(const httplib::ContentReader& reader, std::string& body) const;
  int n_open_connections() const { return n_open_.load(); }
  const ListenerLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  struct Connection {
    socket_t sock;
    bool close_after = false;
  };

  ListenerLimits limits_;
  std::atomic<int> n_open_{0};
  mutable std::mutex mutex_;
  std::unordered_map<const httplib::Request*, Connection*> connection_of_;  // requests being handled
};

}  // namespace kestrel
