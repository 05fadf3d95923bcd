#include "serve/http_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace linnet::serve {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One client's socket and what it has sent: the loop's, or one worker's while a request of it
// is handled.
struct Connection {
  enum class State {
    idle,       // between requests: nothing of the next one has come
    head,       // the request line and headers arriving
    body,       // the body arriving
    lingering,  // refused: the answer sent, what still comes is read and dropped until it ends
    busy,       // a worker handles its request
  };
  enum class Chunk { size, data, data_end, trailer };
  int fd = -1;
  State state = State::idle;
  std::string in;          // bytes received that no request has taken yet
  size_t line_start = 0;   // in the head: where the line being read starts in `in`
  size_t scanned = 0;      // ... and how far `in` was searched for its end
  std::string head;        // the request line and headers, through the empty line
  std::string body;        // the body (a chunked one decoded)
  std::string chunk_prefix, chunk_suffix;  // a chunked body is handed on as one chunk
  bool chunked = false;
  Chunk chunk = Chunk::size;
  uint64_t left = 0;       // bytes still to come of a Content-Length body, or of a chunk
  size_t trailer_bytes = 0;
  bool http10 = false;     // an HTTP/1.0 request: the connection closes after its answer
  size_t served = 0;       // requests answered on this connection
  bool keep = false;       // the worker's verdict: the connection may serve another request
  Clock::time_point deadline{};  // the request's, the idle wait's or the lingering's end
};

namespace {

constexpr size_t kChunkLine = 1024;                        // a chunk-size line, extensions included
constexpr milliseconds kLinger{2000};                      // reading what a refused client still sends
constexpr size_t kSpareDescriptors = 256;                  // beside the connections: files, MPI, …
constexpr milliseconds kAcceptPause{100};                  // out of descriptors: accept again after

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

// poll() for `events` up to `wait`; true when ready.
bool ready(int sock, short events, milliseconds wait) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

// The peer closed or reset the connection, or shut down its sending side (POLLRDHUP: seen
// without reading, so bytes it sent before stay unread).
bool peer_gone(int sock) {
  pollfd p{sock, POLLRDHUP, 0};
  int r;
  do r = ::poll(&p, 1, 0);
  while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

thread_local int t_client = -1;  // the socket of the request this thread handles

// One request read whole by the loop, given to httplib as a connection that ends after it;
// answers are written to the socket.
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(const Connection& c, milliseconds io_timeout)
      : sock_(c.fd), io_timeout_(io_timeout), parts_{c.head, c.chunk_prefix, c.body, c.chunk_suffix} {}

  bool is_readable() const override { return true; }
  bool is_writable() const override { return !peer_gone(sock_) && ready(sock_, POLLOUT, io_timeout_); }
  ssize_t read(char* ptr, size_t size) override {
    while (part_ < parts_.size() && at_ == parts_[part_].size()) {
      ++part_;
      at_ = 0;
    }
    if (part_ == parts_.size()) return 0;  // the request's end, as a closed connection's
    const size_t n = std::min(size, parts_[part_].size() - at_);
    std::memcpy(ptr, parts_[part_].data() + at_, n);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {  // the socket is non-blocking (the loop's): wait for room, at most io_timeout each time
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && ready(sock_, POLLOUT, io_timeout_)) continue;
      failed_ = true;
      return -1;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }
  bool failed() const { return failed_; }

 private:
  int sock_;
  milliseconds io_timeout_;
  std::array<std::string_view, 4> parts_;
  size_t part_ = 0, at_ = 0;
  bool failed_ = false;
};

// ---- where a request ends ------------------------------------------------------------------

struct Refusal {
  int status = 0;
  std::string why;
};

enum class Progress { more, complete, refused };

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A client's text in a message: short, whatever it holds.
std::string quoted(std::string_view s) {
  return "`" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "…`" : "`");
}

std::string too_large(const ConnectionLimits& limits) {
  return str("the request body is larger than ", limits.max_body, " bytes (--max-body)");
}

// How c.head's body comes (Content-Length, chunked or none), or why it cannot be read.
bool frame(Connection& c, const ConnectionLimits& limits, bool& expect_continue, Refusal& r) {
  const std::string_view head = c.head;
  size_t eol = head.find('\n');
  std::string_view request_line = head.substr(0, eol);
  if (!request_line.empty() && request_line.back() == '\r') request_line.remove_suffix(1);
  c.http10 = request_line.size() >= 8 && request_line.substr(request_line.size() - 8) == "HTTP/1.0";
  bool has_length = false;
  std::string_view length, encoding;
  int encodings = 0;
  expect_continue = false;
  for (size_t at = eol + 1; at < head.size();) {
    size_t end = head.find('\n', at);
    if (end == std::string_view::npos) end = head.size();
    std::string_view line = head.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') {
      r = {400, "a header line starts with whitespace (obsolete line folding is not accepted)"};
      return false;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // httplib skips such a line too
    const std::string_view name = line.substr(0, colon), value = trimmed(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      if (has_length && value != length) {
        r = {400, str("conflicting Content-Length headers: ", quoted(length), " and ", quoted(value))};
        return false;
      }
      has_length = true;
      length = value;
    } else if (iequals(name, "Transfer-Encoding")) {
      ++encodings;
      encoding = value;
    } else if (iequals(name, "Expect")) {
      expect_continue = iequals(value, "100-continue");
    }
  }
  c.chunked = false;
  c.left = 0;
  if (encodings > 0) {
    // Both would let two readers of the request disagree on where it ends.
    if (has_length) {
      r = {400, "a request with both Transfer-Encoding and Content-Length"};
      return false;
    }
    if (encodings > 1 || !iequals(encoding, "chunked")) {
      r = {501, str("Transfer-Encoding ", quoted(encoding), " is not supported (only chunked)")};
      return false;
    }
    c.chunked = true;
    c.chunk = Connection::Chunk::size;
    c.trailer_bytes = 0;
    return true;
  }
  if (!has_length) return true;
  if (length.empty() || !std::all_of(length.begin(), length.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    r = {400, str("Content-Length ", quoted(length), " is not a number of bytes")};
    return false;
  }
  uint64_t n = 0;
  for (char ch : length) {
    const auto digit = static_cast<uint64_t>(ch - '0');
    if (n > limits.max_body / 10 || n * 10 + digit > limits.max_body) {  // past it, checked before an overflow
      r = {413, too_large(limits)};
      return false;
    }
    n = n * 10 + digit;
  }
  c.left = n;
  return true;
}

// The chunks of c.in from `at` on, decoded into c.body as they come; counted against max_body.
Progress take_chunks(Connection& c, const ConnectionLimits& limits, size_t& at, Refusal& r) {
  const std::string& in = c.in;
  for (;;) {
    switch (c.chunk) {
      case Connection::Chunk::size: {  // hex digits, maybe ";extensions", then the line's end
        const size_t nl = in.find('\n', at);
        if (nl == std::string::npos) {
          if (in.size() - at > kChunkLine) {
            r = {400, str("a chunk-size line longer than ", kChunkLine, " bytes")};
            return Progress::refused;
          }
          return Progress::more;
        }
        std::string_view line(in.data() + at, nl - at);
        at = nl + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        size_t digits = 0;
        uint64_t size = 0;
        bool over = false;
        for (; digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits])); ++digits) {
          const char ch = static_cast<char>(std::tolower(static_cast<unsigned char>(line[digits])));
          const auto digit = static_cast<uint64_t>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
          over = over || size > limits.max_body / 16 || size * 16 + digit > limits.max_body;  // before an overflow
          if (!over) size = size * 16 + digit;
        }
        const std::string_view rest = line.substr(digits);
        if (digits == 0 || !(rest.empty() || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t')) {
          r = {400, str("a malformed chunk size ", quoted(line))};
          return Progress::refused;
        }
        if (over || size > limits.max_body - c.body.size()) {
          r = {413, too_large(limits)};
          return Progress::refused;
        }
        if (size == 0) {
          c.chunk = Connection::Chunk::trailer;
        } else {
          c.left = size;
          c.chunk = Connection::Chunk::data;
        }
        break;
      }
      case Connection::Chunk::data: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(c.left, in.size() - at));
        c.body.append(in, at, n);
        at += n;
        c.left -= n;
        if (c.left > 0) return Progress::more;
        c.chunk = Connection::Chunk::data_end;
        break;
      }
      case Connection::Chunk::data_end: {  // the line end after a chunk's bytes
        if (at == in.size() || (in[at] == '\r' && at + 1 == in.size())) return Progress::more;
        if (in[at] == '\r' && in[at + 1] == '\n') {
          at += 2;
        } else if (in[at] == '\n') {
          at += 1;
        } else {
          r = {400, "a chunk's bytes are not followed by a line end (its size is wrong)"};
          return Progress::refused;
        }
        c.chunk = Connection::Chunk::size;
        break;
      }
      case Connection::Chunk::trailer: {  // fields after the last chunk (dropped), then an empty line
        const size_t nl = in.find('\n', at);
        const size_t len = (nl == std::string::npos ? in.size() : nl) - at;
        if (nl != std::string::npos && (len == 0 || (len == 1 && in[at] == '\r'))) {
          at = nl + 1;
          return Progress::complete;
        }
        if (c.trailer_bytes + len > limits.header_bytes) {
          r = {431, str("the trailer fields are longer than ", limits.header_bytes, " bytes")};
          return Progress::refused;
        }
        if (nl == std::string::npos) return Progress::more;
        c.trailer_bytes += len + 1;
        at = nl + 1;
        break;
      }
    }
  }
}

// Takes what it can of c.in toward the request arriving on c: its head, then its body.
Progress take(Connection& c, const ConnectionLimits& limits, bool& send_continue, Refusal& r) {
  send_continue = false;
  if (c.state == Connection::State::head) {
    // Lines end with "\n" ("\r\n" as a rule); the first empty one ends the head.
    size_t end = std::string::npos;
    for (;;) {
      const size_t nl = c.in.find('\n', c.scanned);
      if (nl == std::string::npos) {
        c.scanned = c.in.size();
        break;
      }
      const size_t len = nl - c.line_start;
      c.scanned = c.line_start = nl + 1;
      if (len == 0 || (len == 1 && c.in[nl - 1] == '\r')) {
        end = nl + 1;
        break;
      }
    }
    if ((end == std::string::npos ? c.in.size() : end) > limits.header_bytes) {
      r = {431, str("the request line and headers are longer than ", limits.header_bytes, " bytes")};
      return Progress::refused;
    }
    if (end == std::string::npos) return Progress::more;
    c.head.assign(c.in, 0, end);
    c.in.erase(0, end);
    c.line_start = c.scanned = 0;
    bool expect_continue = false;
    if (!frame(c, limits, expect_continue, r)) return Progress::refused;
    c.state = Connection::State::body;
    c.body.clear();
    // The client waits for it before sending the body (unless some of the body came already).
    send_continue = expect_continue && !c.http10 && (c.chunked || c.left > 0) && c.in.empty();
  }
  size_t at = 0;
  Progress p = Progress::more;
  if (c.chunked) {
    p = take_chunks(c, limits, at, r);
  } else {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(c.left, c.in.size()));
    c.body.append(c.in, 0, n);
    at = n;
    c.left -= n;
    if (c.left == 0) p = Progress::complete;
  }
  c.in.erase(0, at);
  if (p == Progress::complete && c.chunked) {
    // httplib reads the body again: as one chunk, whatever the client's chunks were.
    c.chunk_prefix = c.body.empty() ? "" : str(std::hex, c.body.size(), "\r\n");
    c.chunk_suffix = c.body.empty() ? "0\r\n\r\n" : "\r\n0\r\n\r\n";
  }
  return p;
}

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// Sends what fits now, never waiting: a short answer to a fresh socket fits.
void send_now(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    at += static_cast<size_t>(n);
  }
}

void release(std::string& s) { std::string().swap(s); }

}  // namespace

bool client_gone() { return t_client >= 0 && peer_gone(t_client); }

// ---- the event loop ------------------------------------------------------------------------

class GuardedServer::Loop {
 public:
  Loop(GuardedServer& server, int listen_fd)
      : server_(server), limits_(server.limits_), listen_fd_(listen_fd), max_connections_(connection_cap()),
        epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        workers_(std::make_unique<httplib::ThreadPool>(limits_.threads)) {
    if (epoll_fd_ < 0 || wake_fd_ < 0) throw Error(str("serve: cannot make the event loop: ", std::strerror(errno)));
    ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
    watch(wake_fd_);
    watch(listen_fd_);
    thread_ = std::thread([this] { run(); });
  }
  ~Loop() {
    stop();
    ::close(epoll_fd_);
    ::close(wake_fd_);  // only now: a worker's last wake-up may come after the loop has ended
  }
  // Ends the loop once the requests being handled are answered; then the workers.
  void stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    wake();
    thread_.join();
    workers_->shutdown();
  }

 private:
  // The connections allowed open: --http-max-connections, as far as RLIMIT_NOFILE goes (raised
  // to what they need when the hard limit allows).
  size_t connection_cap() const {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return limits_.max_connections;
    const rlim_t want = limits_.max_connections + kSpareDescriptors;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &rl);
      ::getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return limits_.max_connections;
    const size_t cap = rl.rlim_cur > kSpareDescriptors + 16 ? rl.rlim_cur - kSpareDescriptors : 16;
    spdlog::warn("serve: at most {} connections open at once (the open files limit is {})", cap,
                 static_cast<uint64_t>(rl.rlim_cur));
    return cap;
  }

  void watch(int fd) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  void unwatch(int fd) { ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }

  void set_deadline(Connection& c, Clock::time_point t) {
    deadlines_.erase({c.deadline, c.fd});
    c.deadline = t;
    deadlines_.insert({t, c.fd});
  }

  void run() {
    std::vector<epoll_event> events(256);
    bool closing = false;
    for (;;) {
      if (stopping_ && !closing) {
        closing = true;
        unwatch(listen_fd_);
        ::close(listen_fd_);  // new clients are refused by the system from here on
        std::vector<int> open;
        for (const auto& [fd, c] : connections_)
          if (c->state != Connection::State::busy) open.push_back(fd);
        for (int fd : open) close(*connections_.at(fd));
      }
      if (closing && busy_ == 0) break;
      const auto now = Clock::now();
      auto until = [&](Clock::time_point t) {
        return static_cast<int>(std::max<int64_t>(0, std::chrono::ceil<milliseconds>(t - now).count()));
      };
      int timeout = -1;
      if (!deadlines_.empty()) timeout = until(deadlines_.begin()->first);
      if (!accepting_ && !closing) timeout = timeout < 0 ? until(accept_again_) : std::min(timeout, until(accept_again_));
      const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) {
        spdlog::error("serve: epoll_wait failed: {}", std::strerror(errno));
        std::this_thread::sleep_for(milliseconds(10));
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<size_t>(i)].data.fd;
        if (fd == wake_fd_) {
          uint64_t count;
          [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof count);
          std::vector<Connection*> back;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            back.swap(returned_);
          }
          for (Connection* c : back) returned(*c);
        } else if (fd == listen_fd_) {
          if (!closing) accept_all();
        } else if (auto it = connections_.find(fd); it != connections_.end() && it->second->state != Connection::State::busy) {
          readable(*it->second);
        }
      }
      const auto later = Clock::now();
      while (!deadlines_.empty() && deadlines_.begin()->first <= later) expire(*connections_.at(deadlines_.begin()->second));
      if (!accepting_ && !closing && later >= accept_again_) {
        accepting_ = true;
        watch(listen_fd_);
      }
    }
    std::vector<int> open;
    for (const auto& [fd, c] : connections_) open.push_back(fd);
    for (int fd : open) close(*connections_.at(fd));
  }

  void accept_all() {
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Out of descriptors or memory: wait a moment rather than spin on the listening socket.
        spdlog::warn("serve: cannot accept a connection: {}; accepting again in {} ms", std::strerror(errno),
                     kAcceptPause.count());
        unwatch(listen_fd_);
        accepting_ = false;
        accept_again_ = Clock::now() + kAcceptPause;
        return;
      }
      if (connections_.size() >= max_connections_) {
        send_now(fd, answer(503, str("the server has ", max_connections_,
                                     " connections open (--http-max-connections); try again later")));
        ::shutdown(fd, SHUT_WR);
        char scratch[4096];  // what the client sent already: closing over unread bytes would reset the answer
        while (::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0) {
        }
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Connection>();
      c->fd = fd;
      Connection& conn = *c;
      connections_.emplace(fd, std::move(c));
      watch(fd);
      set_deadline(conn, Clock::now() + limits_.idle_timeout);
    }
  }

  void readable(Connection& c) {
    // At most 16 reads a wake-up, so that one fast client does not hold up the others.
    for (int reads = 0; reads < 16; ++reads) {
      const ssize_t n = ::recv(c.fd, buffer_.data(), buffer_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {  // the client left (a request half sent has nobody to answer)
        close(c);
        return;
      }
      if (c.state == Connection::State::lingering) continue;  // dropped
      c.in.append(buffer_.data(), static_cast<size_t>(n));
      advance(c);
      if (c.state == Connection::State::busy) return;  // what comes next waits in the socket
    }
  }

  // Takes what has arrived on c: a whole request goes to a worker.
  void advance(Connection& c) {
    if (c.state == Connection::State::idle) {
      const size_t start = c.in.find_first_not_of("\r\n");  // empty lines before a request are allowed
      if (start == std::string::npos) {
        c.in.clear();
        return;
      }
      c.in.erase(0, start);
      c.state = Connection::State::head;
      c.line_start = c.scanned = 0;
      set_deadline(c, Clock::now() + limits_.request_timeout);
    }
    bool send_continue = false;
    Refusal r;
    switch (take(c, limits_, send_continue, r)) {
      case Progress::more:
        if (send_continue) send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
        return;
      case Progress::complete: dispatch(c); return;
      case Progress::refused: refuse(c, r.status, r.why); return;
    }
  }

  void dispatch(Connection& c) {
    deadlines_.erase({c.deadline, c.fd});
    unwatch(c.fd);
    c.state = Connection::State::busy;
    ++busy_;
    const bool last = c.http10 || stopping_ || c.served + 1 >= limits_.requests_per_connection;
    Connection* conn = &c;
    workers_->enqueue([this, conn, last] {
      conn->keep = server_.serve(*conn, last);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        returned_.push_back(conn);
      }
      wake();
    });
  }

  // A connection back from its worker: closed, or waiting for its next request.
  void returned(Connection& c) {
    --busy_;
    if (!c.keep || stopping_) {
      close(c);
      return;
    }
    c.state = Connection::State::idle;
    release(c.head);
    release(c.body);
    c.chunk_prefix.clear();
    c.chunk_suffix.clear();
    watch(c.fd);
    set_deadline(c, Clock::now() + limits_.idle_timeout);
    if (!c.in.empty()) advance(c);  // pipelined: the next request came with the last one
  }

  std::string answer(int status, const std::string& why) const {
    const std::string body = server_.error_body_ ? server_.error_body_(status, why) : why;
    return str("HTTP/1.1 ", status, " ", reason(status), "\r\nContent-Type: ",
               server_.error_body_ ? "application/json" : "text/plain", "\r\nContent-Length: ", body.size(),
               "\r\nConnection: close\r\n\r\n", body);
  }

  // Answers c by itself and ends it: what the client still sends is read and dropped for a
  // while, as closing over unread bytes would reset the connection before it reads the answer.
  void refuse(Connection& c, int status, const std::string& why) {
    send_now(c.fd, answer(status, why));
    ::shutdown(c.fd, SHUT_WR);
    c.state = Connection::State::lingering;
    release(c.in);
    release(c.head);
    release(c.body);
    set_deadline(c, Clock::now() + kLinger);
  }

  void expire(Connection& c) {
    switch (c.state) {
      case Connection::State::head:
      case Connection::State::body:
        refuse(c, 408, str("the request did not arrive whole within ",
                           std::chrono::duration<double>(limits_.request_timeout).count(), " s (--http-timeout)"));
        return;
      default: close(c); return;  // idle past its time, or done lingering
    }
  }

  void close(Connection& c) {
    const int fd = c.fd;
    deadlines_.erase({c.deadline, fd});
    unwatch(fd);
    ::close(fd);
    connections_.erase(fd);
  }

  GuardedServer& server_;
  const ConnectionLimits& limits_;
  const int listen_fd_;
  const size_t max_connections_;
  const int epoll_fd_, wake_fd_;
  std::unique_ptr<httplib::ThreadPool> workers_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::set<std::pair<Clock::time_point, int>> deadlines_;
  size_t busy_ = 0;  // connections a worker has
  std::mutex mutex_;
  std::vector<Connection*> returned_;  // by the workers, for the loop to take back
  bool accepting_ = true;
  Clock::time_point accept_again_{};
  std::array<char, 64 << 10> buffer_{};
};

// ---- the server ----------------------------------------------------------------------------

GuardedServer::GuardedServer(ConnectionLimits limits, ErrorBody error_body)
    : limits_(limits), error_body_(std::move(error_body)) {}

GuardedServer::~GuardedServer() {
  stop_serving();
  if (svr_sock_ != INVALID_SOCKET) ::close(svr_sock_);  // bound, never served
}

void GuardedServer::start_serving() {
  if (loop_) return;
  if (svr_sock_ == INVALID_SOCKET) throw Error("serve: start_serving before a socket was bound");
  // httplib listens with a backlog of 5: a burst of clients connecting at once would wait on
  // SYN retransmits (a second or more). Listening again on the socket gives it the system's.
  ::listen(svr_sock_, SOMAXCONN);
  loop_ = std::make_unique<Loop>(*this, svr_sock_);
}

void GuardedServer::stop_serving() {
  if (!loop_) return;
  loop_->stop();
  loop_.reset();
  // httplib's answers stream while svr_sock_ is valid: every one has ended by now.
  svr_sock_ = INVALID_SOCKET;
}

bool GuardedServer::serve(Connection& c, bool last) {
  RequestStream stream(c, limits_.io_timeout);
  t_client = c.fd;
  bool closed = false, ok = false;
  try {
    // The loop has answered "Expect: 100-continue" already, or had the body before it could.
    ok = process_request(stream, last, closed, [](httplib::Request& req) { req.headers.erase("Expect"); });
  } catch (const std::exception& e) {
    spdlog::error("serve: a request failed: {}", e.what());
  }
  t_client = -1;
  ++c.served;
  return ok && !closed && !last && !stream.failed();
}

}  // namespace linnet::serve
