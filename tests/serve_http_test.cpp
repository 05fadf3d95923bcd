// `linnet serve`'s connections (serve/http_connection.h) over loopback sockets: bodies held to
// --max-body as they arrive (chunked too, with the process's RSS measured), lengths checked
// before a body is read, slow and idle clients that take no thread, the request deadline, the
// idle timeout, keep-alive and pipelining, HTTP/1.0, the connection cap, a handler asking
// whether its client has gone, and stop() answering what is in progress. Every wait bounded.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/frontend.h"
#include "serve/http.h"
#include "serve/http_connection.h"

using namespace linnet::serve;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A GuardedServer on a free loopback port with a few routes of its own:
//   GET /ok → "ok"; POST /echo → the body; GET /sleep → "slept" after 500 ms;
//   GET /hold → waits until client_gone() (at most 5 s); GET /stream → three chunks, 100 ms apart.
struct TestServer {
  explicit TestServer(ConnectionLimits limits)
      : server(limits, [](int status, const std::string& why) {
          return "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":\"" + why + "\"}}";
        }) {
    server.Get("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    server.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "application/octet-stream");
    });
    server.Get("/sleep", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(milliseconds(500));
      res.set_content("slept", "text/plain");
    });
    server.Get("/hold", [this](const httplib::Request&, httplib::Response& res) {
      gone_at_start = client_gone();
      held = true;
      const auto t0 = Clock::now();
      while (!client_gone() && seconds_since(t0) < 5) std::this_thread::sleep_for(milliseconds(10));
      gone_after = seconds_since(t0);
      res.set_content("held", "text/plain");
    });
    server.Get("/stream", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        std::this_thread::sleep_for(milliseconds(100));
        const std::string part = "part" + std::to_string(offset / 6) + "\n";  // 6 bytes each
        if (!sink.write(part.data(), part.size())) return false;
        if (offset / 6 == 2) sink.done();
        return true;
      });
    });
    port = server.bind_to_any_port("127.0.0.1");
    EXPECT_GT(port, 0);
    server.start_serving();
  }
  GuardedServer server;
  int port = 0;
  std::atomic<bool> gone_at_start{true}, held{false};
  std::atomic<double> gone_after{-1};
};

ConnectionLimits limits(size_t threads = 4) {
  ConnectionLimits l;
  l.threads = threads;
  l.max_body = 1000000;
  l.request_timeout = milliseconds(30000);
  l.idle_timeout = milliseconds(5000);
  return l;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

bool readable(int fd, milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
}

// Bytes until the connection closes, or `wait` passes.
std::string read_until_close(int fd, milliseconds wait = milliseconds(10000)) {
  std::string out;
  const auto deadline = Clock::now() + wait;
  char buf[65536];
  while (Clock::now() < deadline) {
    if (!readable(fd, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()))) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct Response {
  int status = 0;
  std::string head, body;
};

// One answer with a Content-Length body (or a chunked one, decoded) off `fd`, with what was
// read past it kept in `rest`; status 0 when none came within `wait`.
Response read_response(int fd, std::string& rest, milliseconds wait = milliseconds(10000)) {
  const auto deadline = Clock::now() + wait;
  char buf[65536];
  auto more = [&] {
    if (!readable(fd, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()))) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    rest.append(buf, static_cast<size_t>(n));
    return true;
  };
  Response r;
  size_t end;
  while ((end = rest.find("\r\n\r\n")) == std::string::npos)
    if (!more()) return r;
  r.head = rest.substr(0, end + 4);
  rest.erase(0, end + 4);
  r.status = std::stoi(r.head.substr(9, 3));
  if (r.status == 100) return read_response(fd, rest, wait);
  std::string lower = r.head;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (const size_t cl = lower.find("content-length: "); cl != std::string::npos) {
    const size_t n = std::stoul(lower.substr(cl + 16));
    while (rest.size() < n)
      if (!more()) return Response{};
    r.body = rest.substr(0, n);
    rest.erase(0, n);
  } else if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    for (;;) {
      size_t nl;
      while ((nl = rest.find("\r\n")) == std::string::npos)
        if (!more()) return Response{};
      const size_t size = std::stoul(rest.substr(0, nl), nullptr, 16);
      while (rest.size() < nl + 2 + size + 2)
        if (!more()) return Response{};
      r.body += rest.substr(nl + 2, size);
      rest.erase(0, nl + 2 + size + 2);
      if (size == 0) break;
    }
  }
  return r;
}

Response request(int port, const std::string& bytes, milliseconds wait = milliseconds(10000)) {
  const int fd = connect_to(port);
  EXPECT_GE(fd, 0);
  send_all(fd, bytes);
  std::string rest;
  Response r = read_response(fd, rest, wait);
  ::close(fd);
  return r;
}

int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

const std::string kGet = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";

std::string post(const std::string& extra_headers, const std::string& body) {
  return "POST /echo HTTP/1.1\r\nHost: x\r\n" + extra_headers + "\r\n" + body;
}

}  // namespace

// Before: 256 MiB sent chunked against --max-body 1000000 were buffered whole (RSS +250 MB)
// and answered 400 at the end. Now: 413 once the decoded bytes pass the limit, the rest never
// kept; the process grows by a few MB at most.
TEST(ServeHttp, ChunkedBodyOverMaxBodyAnswered413AsItArrives) {
  TestServer t(limits());
  const int64_t rss_before = rss_kib();
  const int fd = connect_to(t.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";  // 64 KiB of data each
  size_t sent = 0;
  bool answered = false;
  const auto t0 = Clock::now();
  while (sent < (256u << 20) && seconds_since(t0) < 60) {
    if (readable(fd, milliseconds(0))) {
      answered = true;
      break;
    }
    if (!send_all(fd, chunk)) break;  // closed on us: the answer is in the socket
    sent += 0x10000;
  }
  std::string rest;
  const Response r = read_response(fd, rest);
  ::close(fd);
  const int64_t grown_kib = rss_kib() - rss_before;
  EXPECT_EQ(r.status, 413) << r.head;
  EXPECT_NE(r.body.find("larger than 1000000 bytes"), std::string::npos) << r.body;
  EXPECT_TRUE(answered) << "the 413 came only after the client had sent " << sent << " bytes";
  EXPECT_LT(sent, 64u << 20) << "the client sent " << sent << " bytes before the 413";
  EXPECT_LT(grown_kib, 16 << 10) << "RSS grew by " << grown_kib << " KiB under a chunked flood";
  std::printf("chunked flood: 413 after %zu bytes sent, RSS %+lld KiB\n", sent, static_cast<long long>(grown_kib));
  EXPECT_EQ(request(t.port, kGet).status, 200);
}

TEST(ServeHttp, ChunkedBodiesWithinTheLimitArriveDecoded) {
  TestServer t(limits());
  // Chunks of several sizes, an extension, a trailer field, the last CRLF sent apart.
  const int fd = connect_to(t.port);
  ASSERT_TRUE(send_all(fd, post("Transfer-Encoding: chunked\r\n", "5;name=x\r\nhello\r\n1\r\n \r\n")));
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(send_all(fd, "5\r\nworld\r\n0\r\nX-Trailer: 1\r\n"));
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(send_all(fd, "\r\n"));
  std::string rest;
  Response r = read_response(fd, rest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  // An empty chunked body, then exactly max_body bytes in 1000-byte chunks, on the same connection.
  ASSERT_TRUE(send_all(fd, post("Transfer-Encoding: chunked\r\n", "0\r\n\r\n")));
  r = read_response(fd, rest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "");
  std::string body;
  for (int i = 0; i < 1000; ++i) body += "3e8\r\n" + std::string(1000, static_cast<char>('a' + i % 26)) + "\r\n";
  ASSERT_TRUE(send_all(fd, post("Transfer-Encoding: chunked\r\n", body + "0\r\n\r\n")));
  r = read_response(fd, rest);
  EXPECT_EQ(r.status, 200);
  ASSERT_EQ(r.body.size(), 1000000u);
  EXPECT_EQ(r.body[999999], static_cast<char>('a' + 999 % 26));
  ::close(fd);
  // One byte more is refused.
  EXPECT_EQ(request(t.port, post("Transfer-Encoding: chunked\r\n", body + "1\r\nx\r\n0\r\n\r\n")).status, 413);
}

// Lengths are checked from the head alone: an oversized Content-Length is answered before a
// byte of its body is sent; one that is not a number of bytes, or conflicts, is a 400.
TEST(ServeHttp, ContentLengthCheckedBeforeTheBody) {
  TestServer t(limits());
  {
    const int fd = connect_to(t.port);
    ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000001\r\n\r\n"));
    std::string rest;
    const auto t0 = Clock::now();
    const Response r = read_response(fd, rest, milliseconds(5000));
    EXPECT_EQ(r.status, 413) << "no answer to an oversized Content-Length without its body";
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_NE(r.head.find("Connection: close"), std::string::npos) << r.head;
    EXPECT_EQ(read_until_close(fd, milliseconds(5000)), "");  // and the connection ends
    ::close(fd);
  }
  struct Case {
    std::string headers;
    int status;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"Content-Length: 99999999999999999999999\r\n", 413, "larger than 1000000 bytes"},
      {"Content-Length: -1\r\n", 400, "Content-Length `-1` is not a number of bytes"},
      {"Content-Length: abc\r\n", 400, "is not a number of bytes"},
      {"Content-Length: 12abc\r\n", 400, "is not a number of bytes"},
      {"Content-Length: +5\r\n", 400, "is not a number of bytes"},
      {"Content-Length:\r\n", 400, "is not a number of bytes"},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", 400, "conflicting Content-Length"},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400, "both Transfer-Encoding and Content-Length"},
      {"Transfer-Encoding: gzip\r\n", 501, "not supported (only chunked)"},
      {"X-Folded: a\r\n b\r\n", 400, "obsolete line folding"},
  };
  for (const Case& c : cases) {
    const Response r = request(t.port, post(c.headers, ""), milliseconds(5000));
    EXPECT_EQ(r.status, c.status) << c.headers;
    EXPECT_NE(r.body.find(c.words), std::string::npos) << c.headers << ": " << r.body;
  }
  // Exactly max_body is read.
  const Response exact = request(t.port, post("Content-Length: 1000000\r\n", std::string(1000000, 'z')));
  EXPECT_EQ(exact.status, 200);
  EXPECT_EQ(exact.body.size(), 1000000u);
  // Malformed chunks.
  for (const std::string& body : {std::string("zz\r\nhello\r\n0\r\n\r\n"), std::string("5\r\nhello!!\r\n0\r\n\r\n"),
                                  std::string("5x\r\nhello\r\n0\r\n\r\n"), std::string(2000, '1')}) {
    const Response r = request(t.port, post("Transfer-Encoding: chunked\r\n", body), milliseconds(5000));
    EXPECT_EQ(r.status, 400) << body.substr(0, 20);
  }
  // A chunk size past the limit is refused at its size line, before its bytes.
  EXPECT_EQ(request(t.port, post("Transfer-Encoding: chunked\r\n", "f4241\r\n")).status, 413);
  EXPECT_EQ(request(t.port, post("Transfer-Encoding: chunked\r\n", "ffffffffffffffffffffff\r\n")).status, 413);
  // Headers past 64 KiB.
  EXPECT_EQ(request(t.port, "GET /ok HTTP/1.1\r\nX-Big: " + std::string(70000, 'b') + "\r\n\r\n").status, 431);
  // The server carries on.
  EXPECT_EQ(request(t.port, kGet).status, 200);
  // A limit under one digit's worth.
  ConnectionLimits tiny = limits();
  tiny.max_body = 5;
  TestServer small(tiny);
  EXPECT_EQ(request(small.port, post("Content-Length: 9\r\n", "123456789")).status, 413);
  EXPECT_EQ(request(small.port, post("Transfer-Encoding: chunked\r\n", "9\r\n123456789\r\n0\r\n\r\n")).status, 413);
  EXPECT_EQ(request(small.port, post("Content-Length: 5\r\n", "12345")).body, "12345");
}

TEST(ServeHttp, ExpectContinue) {
  TestServer t(limits());
  // 100 before the body is sent; the answer after it.
  const int fd = connect_to(t.port);
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(readable(fd, milliseconds(5000)));
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(send_all(fd, "hello"));
  std::string rest;
  const Response r = read_response(fd, rest);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_FALSE(readable(fd, milliseconds(200))) << "a second 100 Continue";
  ::close(fd);
  // Too large: 413 at once, no 100.
  const Response big = request(
      t.port, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2000000\r\n\r\n");
  EXPECT_EQ(big.status, 413);
}

// Before: with 4 threads, 8 clients sending a byte a second held all of them (a normal request
// waited ~40 s), and idle connections held them until their timeout. Now such connections
// hold a socket each, and complete requests are answered at once.
TEST(ServeHttp, SlowAndIdleClientsTakeNoThread) {
  TestServer t(limits(4));
  std::atomic<bool> stop{false};
  std::vector<int> slow;
  std::vector<std::thread> tricklers;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(connect_to(t.port));
    tricklers.emplace_back([fd = slow.back(), &stop] {
      const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'a');
      for (char ch : head) {
        for (int k = 0; k < 10 && !stop; ++k) std::this_thread::sleep_for(milliseconds(100));
        if (stop || ::send(fd, &ch, 1, MSG_NOSIGNAL) != 1) return;
      }
    });
  }
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(connect_to(t.port));  // connected, silent
  for (int i = 0; i < 3; ++i) {  // a head, part of the body, then silence
    idle.push_back(connect_to(t.port));
    send_all(idle.back(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc");
  }
  std::this_thread::sleep_for(milliseconds(1500));
  double slowest = 0;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = Clock::now();
    const Response r = request(t.port, i % 2 ? kGet : post("Content-Length: 5\r\n", "hello"), milliseconds(5000));
    const double took = seconds_since(t0);
    EXPECT_EQ(r.status, 200) << "request " << i << " behind 8 slow and 9 idle clients";
    slowest = std::max(slowest, took);
    EXPECT_LT(took, 1.0) << "request " << i << " waited " << took << " s behind 8 slow and 9 idle clients";
  }
  // Handlers still run four at a time: eight /sleep requests (500 ms each) take two rounds.
  std::vector<std::thread> sleepers;
  std::atomic<int> ok{0};
  const auto t0 = Clock::now();
  for (int i = 0; i < 8; ++i)
    sleepers.emplace_back([&] { ok += request(t.port, "GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n").status == 200; });
  for (auto& s : sleepers) s.join();
  EXPECT_EQ(ok, 8);
  std::printf("behind 8 trickling and 9 idle clients: 6 requests, the slowest %.3f s; 8 handlers of 500 ms on 4 threads: %.3f s\n",
              slowest, seconds_since(t0));
  EXPECT_GT(seconds_since(t0), 0.9);
  EXPECT_LT(seconds_since(t0), 3.0);
  stop = true;
  for (auto& th : tricklers) th.join();
  for (int fd : slow) ::close(fd);
  for (int fd : idle) ::close(fd);
}

// A request must arrive whole within request_timeout of its first byte (408, then the
// connection ends); a connection idle past idle_timeout is closed.
TEST(ServeHttp, RequestDeadlineAndIdleTimeout) {
  ConnectionLimits l = limits();
  l.request_timeout = milliseconds(1000);
  l.idle_timeout = milliseconds(500);
  TestServer t(l);
  // A trickled head: 408 about a second after its first byte, though bytes keep coming.
  const int slow = connect_to(t.port);
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    for (char ch : std::string("GET /ok HTTP/1.1\r\nX-Slow: ") + std::string(100, 'a')) {
      if (stop || ::send(slow, &ch, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  auto t0 = Clock::now();
  std::string answer = read_until_close(slow, milliseconds(5000));
  double took = seconds_since(t0);
  stop = true;
  trickler.join();
  ::close(slow);
  EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 408") << answer;
  EXPECT_GT(took, 0.9);
  EXPECT_LT(took, 2.0);
  // The body counts too: half a body, then nothing.
  const int half = connect_to(t.port);
  send_all(half, post("Content-Length: 10\r\n", "12345"));
  t0 = Clock::now();
  answer = read_until_close(half, milliseconds(5000));
  took = seconds_since(t0);
  ::close(half);
  EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 408") << answer;
  EXPECT_LT(took, 2.0);
  // Idle: closed without a word after idle_timeout, first request or between two.
  const int idle = connect_to(t.port);
  t0 = Clock::now();
  EXPECT_EQ(read_until_close(idle, milliseconds(5000)), "");
  took = seconds_since(t0);
  EXPECT_GT(took, 0.4);
  EXPECT_LT(took, 1.5);
  ::close(idle);
  const int kept = connect_to(t.port);
  send_all(kept, kGet);
  std::string rest;
  EXPECT_EQ(read_response(kept, rest).status, 200);
  t0 = Clock::now();
  EXPECT_EQ(read_until_close(kept, milliseconds(5000)), "");
  EXPECT_LT(seconds_since(t0), 1.5);
  ::close(kept);
}

TEST(ServeHttp, KeepAlivePipeliningAndHttp10) {
  TestServer t(limits());
  const int fd = connect_to(t.port);
  std::string rest;
  // Two requests, one after the other, on one connection.
  for (int i = 0; i < 2; ++i) {
    send_all(fd, kGet);
    const Response r = read_response(fd, rest);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "ok");
  }
  // Three pipelined in one write (a body among them, and an empty line between two): three answers, in order.
  send_all(fd, post("Content-Length: 3\r\n", "abc") + "\r\n" + kGet + post("Content-Length: 2\r\n", "de"));
  EXPECT_EQ(read_response(fd, rest).body, "abc");
  EXPECT_EQ(read_response(fd, rest).body, "ok");
  EXPECT_EQ(read_response(fd, rest).body, "de");
  // Connection: close is honoured.
  send_all(fd, "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_response(fd, rest).status, 200);
  EXPECT_EQ(read_until_close(fd, milliseconds(2000)), "");
  ::close(fd);
  // HTTP/1.0: the answer, then the end of the connection (a streamed one has no other end).
  const int old = connect_to(t.port);
  send_all(old, "GET /stream HTTP/1.0\r\n\r\n");
  const std::string got = read_until_close(old, milliseconds(5000));
  ::close(old);
  EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 200") << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  // A streamed answer to HTTP/1.1: chunks.
  const Response s = request(t.port, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(s.body, "part0\npart1\npart2\n");
}

// A handler can ask whether its client is still there (item 5's cancellation): false while it
// is, true soon after it closes.
TEST(ServeHttp, HandlerSeesItsClientGo) {
  TestServer t(limits());
  EXPECT_FALSE(client_gone());  // not a handler's thread
  const int fd = connect_to(t.port);
  send_all(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto t0 = Clock::now();
  while (!t.held && seconds_since(t0) < 5) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(t.held);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_LT(t.gone_after.load(), 0) << "the handler thought its client gone while it waited";
  ::close(fd);
  while (t.gone_after < 0 && seconds_since(t0) < 10) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_FALSE(t.gone_at_start);
  EXPECT_GE(t.gone_after.load(), 0.15);
  EXPECT_LT(t.gone_after.load(), 1.0) << "the handler did not see its client go";
  EXPECT_EQ(request(t.port, kGet).status, 200);
}

// stop() ends idle connections at once, answers the requests being handled (a streamed one
// too) in full, and refuses new connections.
TEST(ServeHttp, StopAnswersWhatIsInProgress) {
  auto t = std::make_unique<TestServer>(limits());
  const int idle = connect_to(t->port);
  const int slow = connect_to(t->port);
  send_all(slow, "GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n");
  const int streamed = connect_to(t->port);
  send_all(streamed, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(milliseconds(100));
  const auto t0 = Clock::now();
  t->server.stop_serving();
  EXPECT_GT(seconds_since(t0), 0.2) << "stop() did not wait for the requests being handled";
  std::string rest;
  const Response a = read_response(slow, rest);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "slept");
  rest.clear();
  const Response b = read_response(streamed, rest);
  EXPECT_EQ(b.body, "part0\npart1\npart2\n");
  EXPECT_EQ(read_until_close(idle, milliseconds(2000)), "");
  EXPECT_EQ(connect_to(t->port), -1);
  for (int fd : {idle, slow, streamed}) ::close(fd);
}

// Past max_connections a client is told 503 at once; a slot freed is usable again.
TEST(ServeHttp, ConnectionCap) {
  ConnectionLimits l = limits();
  l.max_connections = 4;
  TestServer t(l);
  std::vector<int> open;
  for (int i = 0; i < 4; ++i) open.push_back(connect_to(t.port));
  std::this_thread::sleep_for(milliseconds(100));
  const Response refused = request(t.port, kGet, milliseconds(3000));
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("--http-max-connections"), std::string::npos) << refused.body;
  ::close(open.back());
  open.pop_back();
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(request(t.port, kGet).status, 200);
  for (int fd : open) ::close(fd);
}

// The answers the loop gives by itself carry the API's error shape through HttpServer.
TEST(ServeHttp, LoopRefusalsInTheApiErrorShape) {
  static const auto tok =
      linnet::load_tokenizer((std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model").string());
  ServedModel model;
  model.name = "tiny";
  model.vocab = 1398;
  model.max_seq = 64;
  Frontend front(1, 16);
  HttpOptions options;
  options.port = 0;
  options.max_body = 4096;
  HttpServer http(front, *tok, model, options);
  const int port = http.start();
  Response r = request(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.body,
            "{\"error\":{\"code\":413,\"message\":\"the request body is larger than 4096 bytes (--max-body)\","
            "\"param\":null,\"type\":\"BadRequestError\"}}");
  r = request(port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "8\r\n{\"prompt\r\n9\r\n\": \"hi\"}\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"count\":"), std::string::npos) << r.body;
  http.stop();
}

// The API key and CORS through HttpServer, before any route: a /v1/ request without the key is
// 401 {"error":"Unauthorized"} before its body is parsed (a malformed one too, never a 400);
// /health stays open; a preflight is answered without a key; answers to an allowed origin,
// 401s included, name it.
TEST(ServeHttp, ApiKeyAndCorsBeforeTheRoutes) {
  static const auto tok =
      linnet::load_tokenizer((std::filesystem::path(LINNET_SOURCE_DIR) / "tests/fixtures/lm_eval/model").string());
  ServedModel model;
  model.name = "org/tiny";
  model.vocab = 1398;
  model.max_seq = 64;
  Frontend front(1, 16);
  HttpOptions options;
  options.port = 0;
  options.access.api_keys = {"k1", "second-key"};
  options.access.allowed_origins = {"http://app.example"};
  HttpServer http(front, *tok, model, options);
  const int port = http.start();
  const std::string unauthorized = "{\"error\":\"Unauthorized\"}";
  for (const std::string auth : {"", "Authorization: Bearer k2\r\n", "Authorization: k1\r\n", "Authorization: Basic k1\r\n",
                                 "Authorization: Bearer k1x\r\n", "Authorization: Bearer second\r\n"}) {
    Response r = request(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 9\r\n\r\n{not json");
    EXPECT_EQ(r.status, 401) << auth << r.body;
    EXPECT_EQ(r.body, unauthorized) << auth;
    EXPECT_NE(r.head.find("WWW-Authenticate: Bearer"), std::string::npos) << r.head;
  }
  // With a key the same body reaches its route, which refuses it as JSON.
  Response r = request(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: bearer second-key\r\n"
                             "Content-Length: 9\r\n\r\n{not json");
  EXPECT_EQ(r.status, 400) << r.body;
  r = request(port, "GET /v1/models/org/tiny HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"id\":\"org/tiny\""), std::string::npos) << r.body;
  r = request(port, "GET /v1/models/org%2Ftiny HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  r = request(port, "GET /v1/models/other HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("\"message\":\"The model `other` does not exist; this server serves `org/tiny`\""), std::string::npos)
      << r.body;
  EXPECT_EQ(request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
  EXPECT_EQ(request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
  // A preflight needs no key; another origin is told no.
  r = request(port, "OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                    "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: Authorization\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body, "OK");
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: http://app.example\r\n"), std::string::npos) << r.head;
  EXPECT_NE(r.head.find("Access-Control-Allow-Headers: Authorization\r\n"), std::string::npos) << r.head;
  r = request(port, "OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
                    "Access-Control-Request-Method: POST\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "Disallowed CORS origin");
  EXPECT_EQ(r.head.find("Access-Control-Allow-Origin"), std::string::npos) << r.head;
  r = request(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n\r\n");
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: http://app.example\r\n"), std::string::npos) << r.head;
  r = request(port, "GET /health HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.head.find("Access-Control-Allow-Origin"), std::string::npos) << r.head;
  http.stop();
}
