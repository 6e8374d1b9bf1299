#include "server/http_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace kestrel {
namespace {

// Waits up to timeout_ms for one of events on sock; false on timeout or error.
bool poll_socket(socket_t sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  int r;
  do r = ::poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
}

std::string address_text(const sockaddr_storage& addr, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    port = ntohs(a.sin6_port);
  }
  return text;
}

// A connection's socket as cpp-httplib's Stream, counting what each request may read: its head (request
// line, headers) up to the limits, then its body's raw bytes up to a budget. Past a limit, reads fail and
// writes are dropped (httplib would answer 400), and overflow() says which limit the client broke.
class LimitedSocketStream : public httplib::Stream {
 public:
  enum class Overflow { None, RequestLine, Head, Body };

  LimitedSocketStream(socket_t sock, const ListenerLimits& limits)
      : sock_(sock), limits_(limits), body_budget_(2 * limits.max_body_bytes + (64 << 10)) {}

  void start_request() {
    in_head_ = true;
    line_done_ = false;
    head_bytes_ = body_bytes_ = 0;
    tail_ = 0;
  }
  Overflow overflow() const { return overflow_; }
  // Waits until a request's first byte is here (buffered or on the socket), up to timeout_s, while keep()
  // holds; false on timeout, end of stream or when keep() turns false.
  template <class Keep>
  bool wait_for_request(int timeout_s, Keep keep) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (keep()) {
      if (pos_ < len_) return true;
      if (poll_socket(sock_, POLLIN, 50)) return true;
      if (std::chrono::steady_clock::now() > end) return false;
    }
    return false;
  }
  // Writes all of data to the socket (even after an overflow: the connection's own error response).
  bool write_all(const std::string& data) {
    for (size_t done = 0; done < data.size();) {
      if (!poll_socket(sock_, POLLOUT, limits_.write_timeout_s * 1000)) return false;
      const ssize_t n = ::send(sock_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  bool is_readable() const override { return pos_ < len_ || poll_socket(sock_, POLLIN, limits_.read_timeout_s * 1000); }
  bool is_writable() const override {
    return overflow_ == Overflow::None && poll_socket(sock_, POLLOUT, limits_.write_timeout_s * 1000);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (overflow_ != Overflow::None || size == 0) return -1;
    if (pos_ == len_) {
      if (!is_readable()) return -1;
      ssize_t n;
      do n = ::recv(sock_, buffer_, sizeof buffer_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - pos_);
    if (in_head_) n = count_head(n);
    else if ((body_bytes_ += n) > body_budget_) overflow_ = Overflow::Body;
    if (overflow_ != Overflow::None) return -1;
    std::memcpy(ptr, buffer_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(sock_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_text(addr, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_text(addr, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Counts up to n buffered head bytes; returns how many belong to the head (it may end inside them).
  size_t count_head(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = buffer_[pos_ + i];
      ++head_bytes_;
      if (!line_done_ && head_bytes_ > limits_.max_request_line_bytes) overflow_ = Overflow::RequestLine;
      else if (head_bytes_ > limits_.max_header_bytes) overflow_ = Overflow::Head;
      if (overflow_ != Overflow::None) return 0;
      tail_ = tail_ << 8 | static_cast<unsigned char>(c);
      if (c == '\n') line_done_ = true;
      if ((tail_ & 0xFFFFFFFFu) == 0x0D0A0D0Au) {  // "\r\n\r\n": the body starts after this byte
        in_head_ = false;
        return i + 1;
      }
    }
    return n;
  }

  socket_t sock_;
  const ListenerLimits& limits_;
  size_t body_budget_;
  char buffer_[4096];
  size_t pos_ = 0, len_ = 0;  // unread bytes: buffer_[pos_, len_)
  bool in_head_ = true, line_done_ = false;
  size_t head_bytes_ = 0, body_bytes_ = 0;
  uint64_t tail_ = 0;  // the last bytes of the head, newest lowest
  Overflow overflow_ = Overflow::None;
};

std::string overflow_response(LimitedSocketStream::Overflow o, const ListenerLimits& limits) {
  int status = 413;
  std::string reason = "Payload Too Large", message;
  if (o == LimitedSocketStream::Overflow::RequestLine) {
    status = 414;
    reason = "URI Too Long";
    message = "the request line is longer than " + std::to_string(limits.max_request_line_bytes) + " bytes";
  } else if (o == LimitedSocketStream::Overflow::Head) {
    status = 431;
    reason = "Request Header Fields Too Large";
    message = "the request headers are larger than " + std::to_string(limits.max_header_bytes) + " bytes";
  } else {
    message = "the request body is larger than " + std::to_string(limits.max_body_bytes) + " bytes (--max-body)";
  }
  const std::string body = R"({"error":{"message":")" + message + R"(","type":"invalid_request_error","param":null,"code":null}})";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// Closes a connection. With drain (the client may still be sending a body we did not read), what it sends
// is discarded for a short while first, so that it reads our last response (closing with unread data
// would reset the connection).
void close_connection(socket_t sock, bool drain) {
  ::shutdown(sock, SHUT_WR);
  if (!drain) {
    ::close(sock);
    return;
  }
  char sink[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  size_t drained = 0;
  while (drained < (4u << 20) && std::chrono::steady_clock::now() < end && poll_socket(sock, POLLIN, 50)) {
    const ssize_t n = ::recv(sock, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  ::close(sock);
}

}  // namespace

HttpListener::HttpListener(const ListenerLimits& limits) : limits_(limits) {
  set_payload_max_length(limits.max_body_bytes);
  set_keep_alive_timeout(limits.keep_alive_timeout_s);
  set_read_timeout(limits.read_timeout_s);
  set_write_timeout(limits.write_timeout_s);
  set_keep_alive_max_count(100);
}

bool HttpListener::client_gone(const httplib::Request& req) const {
  socket_t sock;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = connection_of_.find(&req);
    if (it == connection_of_.end()) return false;
    sock = it->second->sock;
  }
  pollfd p{sock, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void HttpListener::close_after(const httplib::Request& req) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = connection_of_.find(&req); it != connection_of_.end()) it->second->close_after = true;
}

BodyStatus HttpListener::read_body(const httplib::ContentReader& reader, std::string& body) const {
  bool too_large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > limits_.max_body_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (too_large) return BodyStatus::TooLarge;
  return ok ? BodyStatus::Ok : BodyStatus::Failed;
}

bool HttpListener::process_and_close_socket(socket_t sock) {
  ++n_open_;
  LimitedSocketStream strm(sock, limits_);
  bool ret = false, drain = false;
  for (size_t remaining = keep_alive_max_count_; remaining > 0; --remaining) {
    if (!strm.wait_for_request(limits_.keep_alive_timeout_s, [this] { return svr_sock_ != INVALID_SOCKET; })) break;
    // Near the thread limit, connections are not kept open for a next request.
    const bool busy = n_open_.load() > limits_.n_threads - limits_.n_reserved_threads;
    const bool close_after_response = remaining == 1 || busy;
    Connection conn{sock};
    const httplib::Request* handled = nullptr;
    bool connection_closed = false;
    strm.start_request();
    ret = process_request(strm, close_after_response, connection_closed, [&](httplib::Request& req) {
      std::lock_guard<std::mutex> lock(mutex_);
      connection_of_[&req] = &conn;
      handled = &req;
    });
    if (handled) {
      std::lock_guard<std::mutex> lock(mutex_);
      connection_of_.erase(handled);
    }
    if (strm.overflow() != LimitedSocketStream::Overflow::None) {
      strm.write_all(overflow_response(strm.overflow(), limits_));
      drain = true;
      break;
    }
    drain = conn.close_after;
    if (!ret || connection_closed || close_after_response || conn.close_after) break;
  }
  close_connection(sock, drain);
  --n_open_;
  return ret;
}

}  // namespace kestrel
