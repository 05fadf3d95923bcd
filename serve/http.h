// `linnet serve`'s HTTP side (cpp-httplib): the OpenAI routes (/v1/completions,
// /v1/chat/completions, /v1/models, /v1/models/{id}) and vLLM's /tokenize and /detokenize, each
// request checked, made into jobs for the Frontend, and answered from their events — whole
// (with whitespace heartbeats while it waits, so a client that left is noticed), or as
// server-sent events. Before any route: the API key and CORS (serve/access.h).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "serve/access.h"
#include "serve/openai_api.h"
#include "serve/frontend.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
struct Request;
struct Response;
}

namespace linnet::serve {

class GuardedServer;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port
  size_t max_body = 16 << 20;            // bytes of a request body
  size_t threads = 1024;                 // requests handled at once (a connection waiting for one takes none)
  size_t max_connections = 4096;         // connections open at once; more are answered 503
  // A request must arrive whole within request_timeout; each write of an answer waits at most
  // io_timeout; an idle keep-alive connection closes after idle_timeout (http_connection.h).
  std::chrono::milliseconds request_timeout{30000}, io_timeout{30000}, idle_timeout{5000};
  AccessOptions access;                  // the API key and CORS
};

class HttpServer {
 public:
  HttpServer(Frontend& frontend, const Tokenizer& tok, ServedModel model, HttpOptions options);
  ~HttpServer();
  // Binds (throws naming host and port when it cannot) and serves on threads of its own: one
  // reads the requests, options.threads handle them. Returns the port (the one chosen when
  // --port 0).
  int start();
  // Stops accepting; returns once the requests in progress are answered.
  void stop();

 private:
  void routes();
  // POST /v1/completions or /v1/chat/completions: checked, queued, answered as its jobs finish.
  void answer(const std::string& route, const httplib::Request& req, httplib::Response& res);
  // A body parsed with the nesting limit (400 otherwise), and in key order when it holds messages.
  static std::pair<nlohmann::json, nlohmann::ordered_json> read_body(const std::string& text);
  Frontend& frontend_;
  const Tokenizer& tok_;
  ServedModel model_;
  HttpOptions options_;
  Cors cors_;
  int64_t started_;            // Unix seconds: /v1/models' "created"
  std::string permission_id_;  // of the model's one permission entry (vLLM lists one)
  std::unique_ptr<GuardedServer> server_;
};

}  // namespace linnet::serve
