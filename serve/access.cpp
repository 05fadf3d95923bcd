#include "serve/access.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace linnet::serve {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool contains(const std::vector<std::string>& items, std::string_view s) {
  return std::find(items.begin(), items.end(), s) != items.end();
}

// Equal or not, in time that depends on the lengths alone: every byte of the client's token is
// looked at whatever came before (the key is not empty).
bool same_key(const std::string& key, std::string_view token) {
  unsigned diff = key.size() != token.size();
  for (size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(token[i]) ^ static_cast<unsigned char>(key[i % key.size()]);
  return diff == 0;
}

// Starlette's: what "*" means in allow_methods, and the headers a browser may always send.
const std::vector<std::string> kAllMethods = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
const std::vector<std::string> kSafelistedHeaders = {"Accept", "Accept-Language", "Content-Language", "Content-Type"};
constexpr const char* kMaxAge = "600";

}  // namespace

bool key_required(std::string_view path) { return path.substr(0, 3) == "/v1"; }

bool key_accepted(const std::vector<std::string>& keys, std::string_view authorization) {
  const size_t space = authorization.find(' ');
  if (space == std::string_view::npos || lower(authorization.substr(0, space)) != "bearer") return false;
  const std::string_view token = authorization.substr(space + 1);
  bool ok = false;
  for (const std::string& key : keys)
    if (!key.empty()) ok |= same_key(key, token);  // no early exit: which key matched takes no time to tell
  return ok;
}

Cors::Cors(const AccessOptions& o)
    : origins_(o.allowed_origins),
      methods_(contains(o.allowed_methods, "*") ? kAllMethods : o.allowed_methods),
      any_origin_(contains(o.allowed_origins, "*")),
      any_header_(contains(o.allowed_headers, "*")),
      credentials_(o.allow_credentials) {
  std::set<std::string> names(kSafelistedHeaders.begin(), kSafelistedHeaders.end());
  names.insert(o.allowed_headers.begin(), o.allowed_headers.end());
  headers_.assign(names.begin(), names.end());  // sorted, as the preflight lists them
}

bool Cors::allowed(std::string_view origin) const { return any_origin_ || contains(origins_, origin); }

Cors::Answer Cors::preflight(std::string_view origin, std::string_view method,
                             const std::optional<std::string>& requested) const {
  Answer a;
  // "*" answers a request without credentials; with them the origin is named (browsers refuse "*").
  const bool name_origin = !any_origin_ || credentials_;
  if (name_origin) a.headers.emplace_back("Vary", "Origin");
  else a.headers.emplace_back("Access-Control-Allow-Origin", "*");
  a.headers.emplace_back("Access-Control-Allow-Methods", joined(methods_));
  a.headers.emplace_back("Access-Control-Max-Age", kMaxAge);
  if (!any_header_) a.headers.emplace_back("Access-Control-Allow-Headers", joined(headers_));
  if (credentials_) a.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  std::vector<std::string> failures;
  if (allowed(origin)) {
    if (name_origin) a.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
  } else {
    failures.push_back("origin");
  }
  if (!contains(methods_, method)) failures.push_back("method");
  if (requested && any_header_) {
    a.headers.emplace_back("Access-Control-Allow-Headers", *requested);  // whatever was asked
  } else if (requested) {
    std::string_view rest = *requested;
    for (;;) {
      const size_t comma = rest.find(',');
      const std::string name = lower(trimmed(rest.substr(0, comma)));
      if (std::none_of(headers_.begin(), headers_.end(), [&](const std::string& h) { return lower(h) == name; })) {
        failures.push_back("headers");
        break;
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (failures.empty()) {
    a.body = "OK";
  } else {
    a.status = 400;
    a.body = "Disallowed CORS " + joined(failures);
  }
  return a;
}

HeaderList Cors::response_headers(std::string_view origin, bool has_cookie) const {
  HeaderList h;
  if (credentials_) h.emplace_back("Access-Control-Allow-Credentials", "true");
  // A request with cookies must see its own origin named, never "*".
  if (allowed(origin) && (!any_origin_ || has_cookie)) {
    h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    h.emplace_back("Vary", "Origin");
  } else if (any_origin_) {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  }
  return h;
}

bool is_loopback(const std::string& host) {
  if (lower(host) == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  return false;
}

}  // namespace linnet::serve
