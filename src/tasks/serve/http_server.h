// The HTTP/1.1 server of `megatron serve`, written for clients that misbehave on purpose.
//
// Why not cpp-httplib (0.11, Debian's): its timeouts apply to each read, so a client that sends
// one header line every few seconds holds a pool thread forever, and a fixed pool of
// max(8, cores − 1) threads was starved by eight such clients; it sets SO_REUSEPORT, so a second
// server on the same port started and split the requests; it accepted two different
// Content-Length headers, or Content-Length with chunked; and it exposes no socket to bound a
// request any other way. This server gives each connection:
//   - one deadline for the whole request (request line, headers and body): `request_timeout`
//     seconds after the connection was accepted, however slowly the bytes arrive (408 after);
//   - its own thread, at most `max_connections` at once; one more is answered 503 at once, so
//     slow clients can hold at most that many slots, each for at most the deadline;
//   - strict framing: a request line and headers within `max_header_bytes`, no obsolete line
//     folding, no Transfer-Encoding (a chunked body is refused: send Content-Length),
//     Content-Length given once (repeats must be identical digits) and at most
//     `max_body_bytes` (413, answered before the body is read); a request the client cuts short
//     (closing its side) is answered 400 at once;
//   - one request per connection (Connection: close), so no state carries from one to the next.
// Writes wait at most `request_timeout` each for the client to take the bytes. stop() shuts every
// connection down (a blocked read or write returns at once) and waits for their threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace megatron {

struct HttpRequest {
  std::string method;                                        // "GET", "PUT", ...
  std::string path;                                          // the target without its query string
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  std::string remote_addr;
  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Writes the one response of a connection: either send() (Content-Length) or a chunked stream.
// Every call returns false once the client is gone (or too slow); later calls do nothing.
class HttpResponder {
 public:
  HttpResponder(int fd, int timeout_seconds) : fd_(fd), timeout_seconds_(timeout_seconds) {}
  bool send(int status, std::string_view content_type, std::string_view body,
            const HttpHeaders& headers = {});
  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& headers = {});
  bool write_chunk(std::string_view data);
  bool end_stream();
  bool responded() const { return responded_; }
  // Whether the client has closed its side (asked while an answer is being prepared; the
  // request was read whole, so anything readable is the end).
  bool peer_closed() const;
  bool client_gone() const { return failed_; }

 private:
  bool write_all(std::string_view data);
  std::string head(int status, std::string_view content_type, const HttpHeaders& headers);
  int fd_;
  int timeout_seconds_;
  bool responded_ = false, failed_ = false;
};

struct HttpLimits {
  int request_timeout_seconds = 30;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  int max_connections = 64;
};

// Answers one complete, well-framed request.
using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;
// Answers a request the server refused before routing (status 400, 408, 413, 431, 503, with the
// reason); `path` is "" when the request line could not be read.
using HttpRejectHandler = std::function<void(std::string_view path, int status,
                                             const std::string& reason, HttpResponder&)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits, HttpHandler handler, HttpRejectHandler reject);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (port 0: any free port) and returns the port. Throws Error naming the
  // address and the fix when the port is taken or the host is not an address of this machine.
  int bind(const std::string& host, int port);
  void start();  // the accept loop, on its own thread
  void stop();   // idempotent; returns when every connection's thread has returned

 private:
  void accept_loop();
  void serve_connection(int fd, std::string remote_addr);

  HttpLimits limits_;
  HttpHandler handler_;
  HttpRejectHandler reject_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable idle_;
  std::set<int> open_;  // connections being served (guarded by mutex_)
};

}  // namespace megatron
