// Who may talk to the server from a browser. A server without an API key on a loopback address is reachable
// by any web page the user opens: a cross-site page could post to it, and a DNS-rebinding page (its own
// name resolving to 127.0.0.1) would even look same-origin. So, without an API key:
// - on a loopback address, the Host header must name a loopback host (localhost, 127.x.x.x, [::1]);
// - a request that carries an Origin (browsers add it to cross-site and to non-GET requests) must come from
//   the server's own origin or from the origin allowed with --cors-origin.
// With --cors-origin, responses carry the CORS headers for that origin and preflights (OPTIONS) are
// answered. With an API key, the key is the protection and Host/Origin are not checked.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace kestrel {

struct WebPolicy {
  std::string bound_host;   // the address the server listens on
  std::string cors_origin;  // "" none, "*" any, else one origin such as "https://app.example.com"
  bool has_api_key = false;
};

// The host part of a Host header or an origin's authority ("[::1]:8080" -> "::1", "a.b:80" -> "a.b").
std::string host_of(const std::string& authority);
bool is_loopback_host(const std::string& host);

// Why a request with these headers is refused (403), or nullopt when it may go on.
std::optional<std::string> refuse_reason(const WebPolicy& policy, const std::string& host_header,
                                         const std::string& origin_header);
// A form body (what an HTML form, or curl -d without a type, sends): application/x-www-form-urlencoded or
// multipart/form-data. The API takes JSON only, which also keeps cross-site form posts out.
bool is_form_content(const std::string& content_type);
// The Access-Control-Allow-Origin value for a request from origin ("" when CORS does not apply).
std::string allowed_cors_origin(const WebPolicy& policy, const std::string& origin_header);

}  // namespace kestrel
