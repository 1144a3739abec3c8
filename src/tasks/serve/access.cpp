#include "tasks/serve/access.h"

#include <arpa/inet.h>

#include <cstdint>

namespace megatron {

namespace {

// The host part of "host", "host:port", "[v6]" or "[v6]:port".
std::string host_of(const std::string& authority) {
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    return close == std::string::npos ? authority : authority.substr(1, close - 1);
  }
  const size_t colon = authority.find(':');
  return colon == std::string::npos ? authority : authority.substr(0, colon);
}

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i)
    diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::string loopback_request_error(const HttpRequest& request) {
  const std::string* host = request.header("host");
  if (host == nullptr || !is_loopback_host(host_of(*host)))
    return "this server listens on a loopback address and answers only requests whose Host is "
           "localhost, 127.0.0.1 or [::1] (got '" +
           (host == nullptr ? std::string("none") : host->substr(0, 100)) +
           "'); to serve other names, start it with --host set to an address of the network";
  if (const std::string* origin = request.header("origin")) {
    const size_t scheme = origin->find("://");
    const std::string authority = scheme == std::string::npos ? "" : origin->substr(scheme + 3);
    if (!is_loopback_host(host_of(authority.substr(0, authority.find('/')))))
      return "cross-origin requests from '" + origin->substr(0, 100) +
             "' are refused: this server listens on a loopback address";
  }
  return "";
}

std::string api_key_error(const HttpRequest& request, const std::string& key) {
  const std::string* auth = request.header("authorization");
  const std::string prefix = "Bearer ";
  if (auth == nullptr || auth->compare(0, prefix.size(), prefix) != 0)
    return "this server needs an API key: send the header 'Authorization: Bearer KEY' (the "
           "key given to megatron serve --api-key)";
  if (!constant_time_equal(auth->substr(prefix.size()), key))
    return "incorrect API key in the Authorization header";
  return "";
}

}  // namespace megatron
