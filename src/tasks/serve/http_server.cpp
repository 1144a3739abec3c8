#include "tasks/serve/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "core/error.h"

namespace megatron {

namespace {

using Clock = std::chrono::steady_clock;

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout or error.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    // Rounded up: a wait never ends before the deadline (the caller tells a timeout by it).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return std::string(v);
}

// A refusal before routing: the status and the sentence that says why.
struct Refusal {
  int status = 0;
  std::string reason;
};

// Parses the request line and headers (`head` ends just before the blank line). Returns the
// refusal, status 0 when the head is acceptable.
Refusal parse_head(std::string_view head, HttpRequest& req) {
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1)
    return {400, "the request line is not 'METHOD target HTTP/1.1'"};
  req.method = std::string(line.substr(0, sp1));
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return {400, "only HTTP/1.0 and HTTP/1.1 requests are served"};
  if (req.method.empty() || !std::all_of(req.method.begin(), req.method.end(), is_token_char) ||
      target.empty() || target.front() != '/')
    return {400, "the request line is not 'METHOD /path HTTP/1.1'"};
  req.path = std::string(target.substr(0, target.find('?')));
  size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    const std::string_view field = head.substr(pos, end - pos);
    pos = end + 2;
    if (field.empty()) continue;
    if (field.front() == ' ' || field.front() == '\t')
      return {400, "obsolete header line folding is not accepted"};
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(field.begin(), field.begin() + colon, is_token_char))
      return {400, "a header line is not 'Name: value'"};
    req.headers.emplace_back(lower(std::string(field.substr(0, colon))),
                             trim_ows(field.substr(colon + 1)));
  }
  return {};
}

// The body length the headers announce; a refusal for Transfer-Encoding, a malformed length,
// or two lengths that differ (request smuggling relies on the server and a proxy picking
// different ones).
Refusal body_length(const HttpRequest& req, size_t max_body, size_t& length) {
  length = 0;
  std::string seen;
  for (const auto& [name, value] : req.headers) {
    if (name == "transfer-encoding")
      return {400,
              "Transfer-Encoding (a chunked request body) is not accepted: send the body with "
              "Content-Length"};
    if (name != "content-length") continue;
    if (value.empty() || value.size() > 18 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return {400, "Content-Length is not a decimal number of bytes"};
    if (!seen.empty() && seen != value)
      return {400, "the request has two different Content-Length headers"};
    seen = value;
  }
  if (seen.empty()) return {};
  const unsigned long long n = std::stoull(seen);
  if (n > max_body)
    return {413, "the request body (" + seen + " bytes) is larger than --max-request-bytes (" +
                     std::to_string(max_body) + ")"};
  length = size_t(n);
  return {};
}

// After answering, reads what the client still sends (for up to `wait`, at most 1 MiB) before
// closing: closing with unread bytes resets the connection, which can destroy the answer before
// the client has read it.
void linger_close(int fd, std::chrono::milliseconds wait) {
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + wait;
  char sink[4096];
  size_t drained = 0;
  while (drained < (1 << 20)) {
    if (wait.count() > 0 && !wait_ready(fd, POLLIN, until)) break;
    const ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += size_t(n);
  }
  ::close(fd);
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n == name) return &v;
  return nullptr;
}

bool HttpResponder::write_all(std::string_view data) {
  if (failed_) return false;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_seconds_);
  while (!data.empty()) {
    if (!wait_ready(fd_, POLLOUT, deadline)) return !(failed_ = true);
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) return !(failed_ = true);
    data.remove_prefix(size_t(n));
  }
  return true;
}

std::string HttpResponder::head(int status, std::string_view content_type,
                                const HttpHeaders& headers) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  h += "Content-Type: " + std::string(content_type) + "\r\nConnection: close\r\n";
  h += "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";
  for (const auto& [name, value] : headers) h += name + ": " + value + "\r\n";
  return h;
}

bool HttpResponder::peer_closed() const {
  pollfd p{fd_, short(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool HttpResponder::send(int status, std::string_view content_type, std::string_view body,
                         const HttpHeaders& headers) {
  if (responded_) return false;
  responded_ = true;
  // One write for head and body: the answer leaves in as few segments as it can, and a client
  // that reads once gets all of it.
  std::string whole = head(status, content_type, headers);
  whole += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  whole += body;
  return write_all(whole);
}

bool HttpResponder::begin_stream(int status, std::string_view content_type,
                                 const HttpHeaders& headers) {
  if (responded_) return false;
  responded_ = true;
  return write_all(head(status, content_type, headers) + "Transfer-Encoding: chunked\r\n\r\n");
}

bool HttpResponder::write_chunk(std::string_view data) {
  if (data.empty()) return !failed_;  // an empty chunk would end the body
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return write_all(std::string(size) + std::string(data) + "\r\n");
}

bool HttpResponder::end_stream() {
  return write_all("0\r\n\r\n");
}

HttpServer::HttpServer(HttpLimits limits, HttpHandler handler, HttpRejectHandler reject)
    : limits_(limits), handler_(std::move(handler)), reject_(std::move(reject)) {}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr)
    MT_THROW("serve: --host ", host, " is not an address or a name this machine can resolve");
  std::string failure;
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only lets the port be bound again while old connections linger in
    // TIME_WAIT; unlike SO_REUSEPORT it never lets a second server listen beside this one.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE)
      failure = "port " + std::to_string(port) + " on " + host +
                " is already in use (another server, maybe an earlier `megatron serve`): stop "
                "it, or choose another --port (0: any free port)";
    else if (failure.empty())
      failure = "cannot listen on " + host + ":" + std::to_string(port) + " (" +
                std::strerror(err) + "): choose an address of this machine with --host";
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) MT_THROW("serve: ", failure);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void HttpServer::start() {
  MT_CHECK(listen_fd_ >= 0, "HttpServer::start before bind");
  acceptor_ = std::thread([this] { accept_loop(); });
}

void HttpServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    char addr[INET6_ADDRSTRLEN] = "";
    if (peer.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, addr, sizeof(addr));
    else
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, addr, sizeof(addr));
    std::unique_lock lock(mutex_);
    if (stopping_ || int(open_.size()) >= limits_.max_connections) {
      lock.unlock();
      // Answered on this thread without waiting for the client: one short write into the new
      // socket's empty buffer, then only the bytes already arrived are drained.
      HttpResponder busy(fd, 1);
      reject_("", 503, "the server has --max-connections connections open; retry later", busy);
      linger_close(fd, std::chrono::milliseconds(0));
      continue;
    }
    open_.insert(fd);
    lock.unlock();
    try {
      std::thread([this, fd, remote = std::string(addr)] {
        serve_connection(fd, remote);
      }).detach();
    } catch (const std::system_error&) {  // no thread to be had: this connection only is refused
      {
        std::lock_guard relock(mutex_);
        open_.erase(fd);
        idle_.notify_all();
      }
      HttpResponder busy(fd, 1);
      reject_("", 503, "the server cannot start a thread for this connection; retry later", busy);
      linger_close(fd, std::chrono::milliseconds(0));
    }
  }
}

void HttpServer::serve_connection(int fd, std::string remote_addr) {
  HttpResponder responder(fd, limits_.request_timeout_seconds);
  const auto deadline = Clock::now() + std::chrono::seconds(limits_.request_timeout_seconds);
  HttpRequest req;
  req.remote_addr = std::move(remote_addr);
  std::string data;
  Refusal refusal;
  bool ended = false;  // the client closed its side (it may still read the answer)
  // Everything that reads the request runs against the one deadline.
  const auto read_more = [&](size_t cap) {
    if (!wait_ready(fd, POLLIN, deadline)) return false;
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), cap - data.size()), 0);
    ended = n == 0;
    if (n <= 0) return false;
    data.append(buf, size_t(n));
    return true;
  };
  size_t head_end = std::string::npos;
  while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
    if (data.size() >= limits_.max_header_bytes) {
      refusal = {431, "the request line and headers are larger than " +
                          std::to_string(limits_.max_header_bytes) + " bytes"};
      break;
    }
    if (!read_more(limits_.max_header_bytes)) {
      if (!data.empty() && ended)
        refusal = {400, "the request ended before its headers did (a blank line ends them)"};
      else if (!data.empty() && Clock::now() >= deadline)
        refusal = {408, "the request did not arrive within --request-timeout (" +
                            std::to_string(limits_.request_timeout_seconds) + " s)"};
      else
        refusal = {-1, ""};  // closed, or idle until the deadline: nothing to answer
      break;
    }
  }
  size_t length = 0;
  if (refusal.status == 0) refusal = parse_head(std::string_view(data).substr(0, head_end), req);
  if (refusal.status == 0) refusal = body_length(req, limits_.max_body_bytes, length);
  if (refusal.status == 0) {
    data.erase(0, head_end + 4);
    const std::string* expect = req.header("expect");
    if (expect != nullptr && lower(*expect) == "100-continue" && data.size() < length) {
      const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      ::send(fd, cont.data(), cont.size(), MSG_NOSIGNAL);
    }
    while (data.size() < length && read_more(length)) {
    }
    if (data.size() < length && ended)
      refusal = {400, "the request body ended after " + std::to_string(data.size()) + " of its " +
                          std::to_string(length) + " bytes (Content-Length)"};
    else if (data.size() < length)
      refusal = {408, "the request body did not arrive within --request-timeout (" +
                          std::to_string(limits_.request_timeout_seconds) + " s)"};
    else if (data.size() > length)
      refusal = {400,
                 "the request has more bytes than its Content-Length (pipelining is not "
                 "served: one request per connection)"};
    req.body = std::move(data);
  }
  if (refusal.status > 0)
    reject_(req.path, refusal.status, refusal.reason, responder);
  else if (refusal.status == 0)
    handler_(req, responder);
  {
    // Out of the set before the descriptor is closed: once closed, its number can come back
    // with the next accepted connection, which this erase must not remove.
    std::lock_guard lock(mutex_);
    open_.erase(fd);
    idle_.notify_all();
  }
  linger_close(fd, std::chrono::milliseconds(500));  // touches no member: the server may be gone
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::unique_lock lock(mutex_);
  // Every blocked read or write of a connection returns at once; its thread then finishes.
  for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  idle_.wait(lock, [&] { return open_.empty(); });
}

}  // namespace megatron
