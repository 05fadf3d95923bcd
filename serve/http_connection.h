// cpp-httplib's Server behind an event loop of our own, so that a slow or idle client costs a
// socket, not a thread (eight clients trickling a byte a second held every thread of
// --http-threads 4, and a 256 MiB chunked body was buffered whole):
//   - one thread (epoll) accepts the connections and reads each request whole — its line and
//     headers (at most `header_bytes`), then its body (at most `max_body` bytes; a chunked
//     body's decoded bytes are counted as they arrive) — within `request_timeout` of its first
//     byte; only a complete request goes to one of `threads` workers;
//   - a worker runs httplib's request processing (parsing, routing, the handler, the answer)
//     over the buffered request and writes the answer to the socket, each write waiting at
//     most `io_timeout`; a kept-alive connection then goes back to the loop, which closes it
//     after `idle_timeout` without a new request;
//   - the loop answers by itself, and closes the connection: 413 for a body over max_body (at
//     once for a Content-Length that says so, without reading the body), 400 for a
//     Content-Length that is not a number or a malformed chunk, 408 for a request not whole
//     within request_timeout, 431 for headers over header_bytes, 501 for a transfer coding
//     other than chunked, 503 past `max_connections`.
// The loop finds where a request ends (the blank line after the headers, Content-Length or the
// chunk sizes) and nothing more; httplib parses what it hands over.
#pragma once
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace linnet::serve {

struct ConnectionLimits {
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds io_timeout{30000};
  std::chrono::milliseconds idle_timeout{5000};
  size_t header_bytes = 64 << 10;
  size_t max_body = 16 << 20;
  size_t requests_per_connection = 100;
  size_t threads = 1024;           // requests handled at once
  size_t max_connections = 4096;   // sockets open at once (cut to what RLIMIT_NOFILE allows)
};

// The body of an answer the loop gives by itself (status, why): e.g. the API's error JSON.
using ErrorBody = std::function<std::string(int status, const std::string& why)>;

struct Connection;  // one client's socket and what it has sent (http_connection.cpp)

// Whether the client of the request this thread is handling has gone: its connection is closed
// or reset, or it shut down its sending side. One poll() of the socket, no bytes read; false on
// a thread that is not handling a request. For handlers (and what they call: rendering, waiting
// on the engine) to stop work nobody will read.
bool client_gone();

class GuardedServer : public httplib::Server {
 public:
  GuardedServer(ConnectionLimits limits, ErrorBody error_body);
  ~GuardedServer() override;
  // Serves the socket bound by bind_to_port / bind_to_any_port on a thread of its own.
  void start_serving();
  // Stops accepting and closes the connections between requests; returns once the requests
  // being handled are answered.
  void stop_serving();

 private:
  class Loop;
  // One complete request, on a worker: httplib's processing; true when the connection may
  // serve another.
  bool serve(Connection& c, bool last);
  ConnectionLimits limits_;
  ErrorBody error_body_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace linnet::serve
