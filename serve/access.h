// Who may use `linnet serve`, as vLLM's server decides it: an API key (--api-key or
// LINNET_API_KEY) asked of the OpenAI routes (/v1/…) as a Bearer token, and CORS for browsers
// (--allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials) answered as
// FastAPI's CORSMiddleware answers them. Plain functions of headers and paths: serve/http.cpp
// applies them to each request before its route runs.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace linnet::serve {

struct AccessOptions {
  std::vector<std::string> api_keys;          // empty: no key asked
  std::vector<std::string> allowed_origins;   // "*": any origin; empty: no CORS headers at all
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

// Whether a request for `path` needs a key: the OpenAI routes (/v1/…), as vLLM guards them;
// /health, /metrics, /tokenize and /detokenize stay open.
bool key_required(std::string_view path);
// Whether an Authorization header's value ("Bearer KEY", the scheme in any case) carries one of
// `keys`. Every key is compared, each in time that depends on the lengths only, not on where
// the bytes first differ.
bool key_accepted(const std::vector<std::string>& keys, std::string_view authorization);

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// CORS as Starlette's CORSMiddleware (which vLLM's server uses) answers it: a preflight gets 200
// "OK" or 400 "Disallowed CORS origin, method, headers"; an answer to a request with an Origin
// carries Access-Control-Allow-Origin when the origin is allowed.
class Cors {
 public:
  explicit Cors(const AccessOptions& options);
  bool enabled() const { return !origins_.empty(); }
  struct Answer {
    int status = 200;
    HeaderList headers;
    std::string body;
  };
  // OPTIONS with Origin and Access-Control-Request-Method (the headers asked for, when given).
  Answer preflight(std::string_view origin, std::string_view method, const std::optional<std::string>& headers) const;
  // What an answer to a request from `origin` carries (has_cookie: the request sent cookies).
  HeaderList response_headers(std::string_view origin, bool has_cookie) const;

 private:
  bool allowed(std::string_view origin) const;
  std::vector<std::string> origins_, methods_, headers_;  // headers_: sorted as given, compared in any case
  bool any_origin_ = false, any_header_ = false, credentials_ = false;
};

// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost): a server listening
// anywhere else without a key serves whoever reaches it.
bool is_loopback(const std::string& host);

}  // namespace linnet::serve
