#include "server/web_policy.h"

#include <algorithm>
#include <cctype>

namespace kestrel {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "http://localhost:8080/" -> "localhost:8080"; "" for "null" or anything without a scheme.
std::string origin_authority(const std::string& origin) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return "";
  std::string rest = origin.substr(scheme + 3);
  return rest.substr(0, rest.find('/'));
}
}  // namespace

std::string host_of(const std::string& authority) {
  std::string a = lower(authority);
  if (!a.empty() && a[0] == '[') return a.substr(1, a.find(']') == std::string::npos ? std::string::npos : a.find(']') - 1);
  const size_t colon = a.find(':');
  if (colon != std::string::npos && a.find(':', colon + 1) == std::string::npos) a.resize(colon);  // host:port
  while (!a.empty() && a.back() == '.') a.pop_back();  // "localhost." names localhost too
  return a;
}

bool is_loopback_host(const std::string& host) {
  const std::string h = lower(host);
  if (h == "localhost" || h == "::1" || h == "0:0:0:0:0:0:0:1" || h == "::ffff:127.0.0.1") return true;
  if (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0) return true;
  // 127.0.0.0/8, written as a dotted quad.
  if (h.rfind("127.", 0) != 0) return false;
  int dots = 0;
  for (char c : h) {
    if (c == '.') ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return dots == 3;
}

std::optional<std::string> refuse_reason(const WebPolicy& policy, const std::string& host_header,
                                         const std::string& origin_header) {
  if (policy.has_api_key) return std::nullopt;
  if (is_loopback_host(host_of(policy.bound_host)) && !host_header.empty() && !is_loopback_host(host_of(host_header)))
    return "the Host header '" + host_header + "' does not name this server (a loopback address); "
           "requests through other names are refused unless --api-key is set";
  if (origin_header.empty()) return std::nullopt;
  if (!allowed_cors_origin(policy, origin_header).empty()) return std::nullopt;
  // Same origin: the page was served by this very host and port.
  if (lower(origin_authority(origin_header)) == lower(host_header) && !host_header.empty()) return std::nullopt;
  return "cross-origin requests from '" + origin_header + "' are refused; allow an origin with --cors-origin";
}

bool is_form_content(const std::string& content_type) {
  std::string type = lower(content_type.substr(0, content_type.find(';')));
  type.erase(std::remove(type.begin(), type.end(), ' '), type.end());
  return type == "application/x-www-form-urlencoded" || type == "multipart/form-data";
}

std::string allowed_cors_origin(const WebPolicy& policy, const std::string& origin_header) {
  if (policy.cors_origin.empty() || origin_header.empty()) return "";
  if (policy.cors_origin == "*") return "*";
  return lower(policy.cors_origin) == lower(origin_header) ? policy.cors_origin : "";
}

}  // namespace kestrel
