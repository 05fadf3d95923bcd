// cpp-httplib's Server with every connection held to limits, so that slow or idle clients
// cannot take its threads (a client sending one header byte a second kept a thread forever):
//   - a request (its line, headers and body) must arrive within `request_timeout` of its first
//     byte; its line and headers in at most `header_bytes`, its body in at most max_body;
//   - each read and write waits at most `io_timeout`; an idle keep-alive connection is closed
//     after `idle_timeout`.
// httplib reads a request through its Stream interface: this server serves each connection
// through a Stream of its own that enforces the limits, and calls httplib's request
// processing (Server::process_request) as httplib's own connection loop does.
#pragma once
#include <httplib.h>

#include <chrono>

namespace linnet::serve {

struct ConnectionLimits {
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds io_timeout{30000};
  std::chrono::milliseconds idle_timeout{5000};
  size_t header_bytes = 64 << 10;  // beyond the body's limit
  size_t max_body = 16 << 20;
  size_t requests_per_connection = 100;
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionLimits limits);
  // A request's handler has started (called from the pre-routing handler): its reads are
  // no longer held to the request deadline (a streamed answer may run long).
  static void request_arrived();

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConnectionLimits limits_;
};

}  // namespace linnet::serve
