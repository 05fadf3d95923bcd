#include "serve/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace linnet::serve {

using Clock = std::chrono::steady_clock;

namespace {

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len)
            : ::getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// poll() for `events` up to `wait` (0 or less: do not wait); true when ready.
bool ready(int sock, short events, std::chrono::milliseconds wait) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

// One connection: reads buffered (httplib reads headers a byte at a time), each wait
// bounded by the I/O timeout and, while a request is arriving, by its deadline and byte budget.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int sock, const ConnectionLimits& limits) : sock_(sock), limits_(limits) {}

  void begin_request() {
    deadline_ = Clock::now() + limits_.request_timeout;
    budget_ = limits_.header_bytes;  // until the blank line that ends the headers; then the body's
    in_headers_ = true;
    tail_ = 0;
    arriving_ = true;
  }
  void request_arrived() { arriving_ = false; }

  bool is_readable() const override { return at_ < buffer_.size() || ready(sock_, POLLIN, limits_.io_timeout); }
  bool is_writable() const override {
    if (!ready(sock_, POLLOUT, limits_.io_timeout)) return false;
    // A peer that closed its end reads as readable with nothing to read.
    char c;
    return !ready(sock_, POLLIN, std::chrono::milliseconds(0)) || ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (at_ == buffer_.size()) {
      std::chrono::milliseconds wait = limits_.io_timeout;
      if (arriving_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
        if (left.count() <= 0) return -1;  // too slow: the connection ends
        wait = std::min(wait, left);
      }
      if (!ready(sock_, POLLIN, wait)) return -1;
      buffer_.resize(4096);
      ssize_t n;
      do n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) {
        buffer_.clear();
        at_ = 0;
        return n;
      }
      buffer_.resize(static_cast<size_t>(n));
      at_ = 0;
    }
    size_t n = std::min(size, buffer_.size() - at_);
    if (arriving_) {
      n = std::min(n, budget_);
      if (n == 0) return -1;
      budget_ -= n;
      for (size_t i = 0; in_headers_ && i < n; ++i) {
        tail_ = tail_ << 8 | static_cast<unsigned char>(buffer_[at_ + i]);
        if ((tail_ & 0xffffffff) == 0x0d0a0d0a || (tail_ & 0xffff) == 0x0a0a) {  // "\r\n\r\n" (or "\n\n")
          in_headers_ = false;
          budget_ = limits_.max_body + limits_.header_bytes;  // the body (httplib answers 413 past max_body)
        }
      }
    }
    std::copy_n(buffer_.data() + at_, n, ptr);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!ready(sock_, POLLOUT, limits_.io_timeout)) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }
  bool has_buffered() const { return at_ < buffer_.size(); }

 private:
  int sock_;
  const ConnectionLimits& limits_;
  std::string buffer_;
  size_t at_ = 0;
  Clock::time_point deadline_{};
  size_t budget_ = 0;
  bool arriving_ = false, in_headers_ = false;
  uint64_t tail_ = 0;  // the last bytes read, to see where the headers end
};

thread_local GuardedStream* t_stream = nullptr;

}  // namespace

GuardedServer::GuardedServer(ConnectionLimits limits) : limits_(limits) {}

void GuardedServer::request_arrived() {
  if (t_stream) t_stream->request_arrived();
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  GuardedStream stream(sock, limits_);
  t_stream = &stream;
  bool ok = true;
  // Keep-alive: the next request must start within the idle timeout; the connection ends
  // with the server, after its request limit, or when a request fails or closes it.
  for (size_t served = 0; ok && served < limits_.requests_per_connection && svr_sock_ != INVALID_SOCKET; ++served) {
    if (!stream.has_buffered() && !ready(sock, POLLIN, limits_.idle_timeout)) break;
    stream.begin_request();
    bool closed = false;
    ok = process_request(stream, served + 1 == limits_.requests_per_connection, closed, nullptr) && !closed;
  }
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace linnet::serve
