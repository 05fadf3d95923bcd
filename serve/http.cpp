#include "serve/http.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <random>

#include <sys/socket.h>

#include "core/error.h"
#include "core/files.h"
#include "serve/http_connection.h"

namespace linnet::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump(e.body()), "application/json");
}

// One request's answer as its jobs' events come: choice i is job i.
struct Reply {
  CompletionParams params;
  std::vector<ServeJob> jobs;
  std::map<uint64_t, size_t> choice_of;
  std::shared_ptr<RequestStream> stream;
  std::vector<ChoiceResult> results;
  std::vector<bool> done, opened;
  size_t n_done = 0;
  bool started = false;  // a chat stream's role chunks sent
  std::string id, model;
  int64_t created = 0;
  Clock::time_point last_write = Clock::now();

  // Applies an event; returns its choice.
  size_t apply(const JobEvent& e) {
    const size_t i = choice_of.at(e.id);
    if (done[i]) return i;
    if (apply_event(results[i], e)) {
      done[i] = true;
      ++n_done;
    }
    return i;
  }
  bool finished() const { return n_done == results.size(); }
  std::string first_error() const {
    for (const auto& r : results)
      if (!r.error.empty()) return r.error;
    return "";
  }
};

bool is_preflight(const httplib::Request& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method");
}

bool write(httplib::DataSink& sink, Reply& r, const std::string& s) {
  r.last_write = Clock::now();
  return sink.is_writable() && sink.write(s.data(), s.size());
}

std::string event(const json& j) { return "data: " + dump(j) + "\n\n"; }

// A message's tool calls as a stream's delta carries them: each with its index. They come
// whole, in the last chunk (a harmony call ends the answer).
json stream_tool_calls(const json& message) {
  json calls = message.at("tool_calls");
  for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
  return calls;
}

// An answer written as it comes: chunked to an HTTP/1.1 client; to an HTTP/1.0 one, which
// knows no chunks, as plain bytes ended by closing the connection.
void provide(const httplib::Request& req, httplib::Response& res, const char* type,
             std::function<bool(size_t, httplib::DataSink&)> content, std::function<void(bool)> release) {
  if (req.version == "HTTP/1.0") res.set_content_provider(type, std::move(content), std::move(release));
  else res.set_chunked_content_provider(type, std::move(content), std::move(release));
}

}  // namespace

HttpServer::HttpServer(Frontend& frontend, const Tokenizer& tok, ServedModel model, HttpOptions options)
    : frontend_(frontend),
      tok_(tok),
      model_(std::move(model)),
      options_(std::move(options)),
      cors_(options_.access),
      started_(static_cast<int64_t>(std::time(nullptr))) {
  std::random_device random;
  permission_id_ = str("modelperm-", std::hex, random(), random(), random(), random());
  ConnectionLimits limits;
  limits.request_timeout = options_.request_timeout;
  limits.io_timeout = options_.io_timeout;
  limits.idle_timeout = options_.idle_timeout;
  limits.max_body = options_.max_body;
  limits.threads = options_.threads;
  limits.max_connections = options_.max_connections;
  // What the connections' loop answers by itself (413, 400, 408, …) has the API's error shape.
  server_ = std::make_unique<GuardedServer>(
      limits, [](int status, const std::string& why) { return dump(ApiError(status, why).body()); });
  routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::routes() {
  httplib::Server& svr = *server_;
  svr.set_payload_max_length(options_.max_body);
  // What httplib's Keep-Alive header tells the client (the loop closes an idle connection).
  svr.set_keep_alive_max_count(ConnectionLimits().requests_per_connection);
  svr.set_keep_alive_timeout(std::max<time_t>(1, std::chrono::ceil<std::chrono::seconds>(options_.idle_timeout).count()));
  // Whatever httplib answers by itself (404, 413, 400 on a bad request line) gets the API's
  // error shape too.
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string why = str("HTTP ", res.status, " for ", req.method, " ", req.path);
    if (res.status == 413) why = str("the request body is larger than ", options_.max_body, " bytes (--max-body)");
    if (res.status == 404) why = str("no route ", req.method, " ", req.path, " (see docs/serve.md)");
    res.set_content(dump(ApiError(res.status, why).body()), "application/json");
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    spdlog::error("serve: {}", why);
    send_error(res, ApiError(500, why));
  });

  // Before any route: a CORS preflight is answered here; without the key a /v1/ route is 401
  // before its body is parsed (an OPTIONS passes: browsers send no key with a preflight).
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (cors_.enabled() && is_preflight(req)) {
      const std::optional<std::string> asked =
          req.has_header("Access-Control-Request-Headers")
              ? std::optional<std::string>(req.get_header_value("Access-Control-Request-Headers"))
              : std::nullopt;
      Cors::Answer a = cors_.preflight(req.get_header_value("Origin"),
                                       req.get_header_value("Access-Control-Request-Method"), asked);
      res.status = a.status;
      for (const auto& [name, value] : a.headers) res.set_header(name, value);
      res.set_content(a.body, "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::vector<std::string>& keys = options_.access.api_keys;
    if (!keys.empty() && req.method != "OPTIONS" && key_required(req.path) &&
        !key_accepted(keys, req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("{\"error\":\"Unauthorized\"}", "application/json");  // vLLM's body
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every answer httplib writes (streams, errors and 401s too) to a request with an Origin.
  svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!cors_.enabled() || !req.has_header("Origin") || is_preflight(req)) return;
    for (const auto& [name, value] : cors_.response_headers(req.get_header_value("Origin"), req.has_header("Cookie")))
      res.set_header(name, value);
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const Health h = frontend_.health();
    res.status = h == Health::ok ? 200 : 503;
    res.set_content(h == Health::ok ? "{\"status\":\"ok\"}" : h == Health::draining ? "{\"status\":\"draining\"}"
                                                                                 : "{\"status\":\"failed\"}",
                    "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(frontend_.metrics_text(model_.name), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json card = model_card(model_, started_, permission_id_);
    res.set_content(dump({{"object", "list"}, {"data", json::array({card})}}), "application/json");
  });
  // OpenAI's "retrieve model"; the id may hold slashes ("org/name"), as the openai client sends it.
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1].str() != model_.name) return send_error(res, model_not_found(req.matches[1].str(), model_));
    res.set_content(dump(model_card(model_, started_, permission_id_)), "application/json");
  });
  for (const char* route : {"/v1/completions", "/v1/chat/completions"})
    svr.Post(route, [this, route = std::string(route)](const httplib::Request& req, httplib::Response& res) {
      answer(route, req, res);
    });
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const auto [body, ordered] = read_body(req.body);
      res.set_content(dump(tokenize_body(body, ordered, tok_, model_, [] { return client_gone(); })),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(400, e.what()));
    }
  });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_content(dump(detokenize_body(read_body(req.body).first, tok_, model_)), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(400, e.what()));
    }
  });
}

std::pair<json, nlohmann::ordered_json> HttpServer::read_body(const std::string& text) {
  try {  // with the nesting limit: a deep body would overflow the stack of what walks it
    json body = parse_json(text, "the request body");
    // The keys in the order written, for what a chat template reads (as Python's dicts keep them).
    nlohmann::ordered_json ordered = body.contains("messages") ? parse_ordered_json(text, "the request body")
                                                               : nlohmann::ordered_json();
    return {std::move(body), std::move(ordered)};
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

void HttpServer::answer(const std::string& route, const httplib::Request& req, httplib::Response& res) {
  auto r = std::make_shared<Reply>();
  try {
    const auto [body, ordered] = read_body(req.body);
    // A chat template rendering for a client that has left stops (issue 34: 60k keys kept a
    // worker busy for 37 s after the client had gone).
    r->params = parse_request(route, body, ordered, tok_, model_, [] { return client_gone(); });
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const std::exception& e) {  // e.g. the tokenizer refusing a text
    send_error(res, ApiError(400, e.what(), "prompt"));
    return;
  }
  const CompletionParams& p = r->params;
  uint64_t seed = p.sampling.seed;
  if (!p.seeded) seed = std::random_device{}() & 0x7fffffff;
  r->jobs = jobs_of(p, seed);
  try {
    r->stream = frontend_.submit(r->jobs);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  for (size_t i = 0; i < r->jobs.size(); ++i) r->choice_of[r->jobs[i].id] = i;
  r->results.resize(r->jobs.size());
  r->done.assign(r->jobs.size(), false);
  r->opened.assign(r->jobs.size(), false);
  r->id = response_id(p, r->jobs.front().id);
  r->model = model_.name;
  r->created = static_cast<int64_t>(std::time(nullptr));
  // The client gone (or the answer cut short): whatever has not finished is cancelled.
  auto release = [this, r](bool) { frontend_.cancel(r->jobs); };
  if (!p.stream) {
    provide(
        req, res, "application/json",
        [this, r](size_t, httplib::DataSink& sink) {
          for (const JobEvent& e : r->stream->wait(std::chrono::milliseconds(500))) r->apply(e);
          if (r->finished()) {
            const std::string err = r->first_error();
            const std::string body = err.empty() ? dump(completion_body(r->id, r->created, r->model, r->params, r->results, tok_))
                                                 : dump(ApiError(500, err).body());
            if (!write(sink, *r, body)) return false;
            sink.done();
            return true;
          }
          // Whitespace before the JSON is still the JSON; writing it finds a closed socket.
          if (Clock::now() - r->last_write > std::chrono::seconds(1)) return write(sink, *r, " ");
          return true;
        },
        release);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  provide(
      req, res, "text/event-stream",
      [this, r](size_t, httplib::DataSink& sink) {
        const CompletionParams& p = r->params;
        if (p.chat && !r->started) {  // each choice's role first, as OpenAI's stream starts
          r->started = true;
          for (size_t i = 0; i < r->results.size(); ++i)
            if (!write(sink, *r, event(chat_chunk(r->id, r->created, r->model, i, {{"role", "assistant"}, {"content", ""}},
                                                  nullptr, nullptr))))
              return false;
        }
        for (const JobEvent& e : r->stream->wait(std::chrono::milliseconds(500))) {
          const size_t i = r->apply(e);
          const PromptIn& prompt = p.prompts[i / static_cast<size_t>(p.n)];
          const ChoiceResult& c = r->results[i];
          if (e.done && !e.error.empty()) {
            if (!write(sink, *r, event(ApiError(500, e.error).body()))) return false;
            continue;
          }
          if (p.logprobs >= 0 || p.prompt_logprobs >= 0) {
            // Log-probabilities come from scoring the finished completion: one chunk then.
            if (!e.done) continue;
            const json lp = p.logprobs < 0 ? json(nullptr)
                            : p.chat       ? chat_logprobs_json(tok_, prompt, c, p.tokens_as_ids, p.logprobs)
                                           : logprobs_json(tok_, prompt, c, p.echo, 0, 0, p.tokens_as_ids, p.logprobs);
            json delta = p.reasoning_parser.empty() ? json{{"content", c.text}} : chat_delta(c.text, c.reasoning);
            if (!c.tool_calls.empty()) delta["tool_calls"] = stream_tool_calls(chat_message(p, c));
            json chunk = p.chat ? chat_chunk(r->id, r->created, r->model, i, delta, lp, c.finish_reason)
                                : stream_chunk(r->id, r->created, r->model, i,
                                               (p.echo ? echo_text(tok_, prompt) : "") + c.text, lp, c.finish_reason);
            chunk["choices"][0]["stop_reason"] = c.stop_reason;
            if (p.prompt_logprobs >= 0)
              (p.chat ? chunk : chunk["choices"][0])["prompt_logprobs"] =
                  prompt_logprobs_json(tok_, prompt, c, p.prompt_logprobs, p.tokens_as_ids);
            if (!write(sink, *r, event(chunk))) return false;
            continue;
          }
          std::string text = e.text;
          if (p.echo && !r->opened[i]) text = echo_text(tok_, prompt) + text;
          r->opened[i] = true;
          if (text.empty() && e.reasoning.empty() && !e.done) continue;
          const json finish = e.done ? json(c.finish_reason) : json(nullptr);
          json delta = chat_delta(text, e.reasoning);
          if (e.done && !c.tool_calls.empty()) delta["tool_calls"] = stream_tool_calls(chat_message(p, c));
          json chunk = p.chat ? chat_chunk(r->id, r->created, r->model, i, delta, nullptr, finish)
                              : stream_chunk(r->id, r->created, r->model, i, text, nullptr, finish);
          if (e.done) chunk["choices"][0]["stop_reason"] = c.stop_reason;
          if (!write(sink, *r, event(chunk))) return false;
        }
        if (r->finished()) {
          if (p.include_usage) {
            json body = completion_body(r->id, r->created, r->model, p, r->results, tok_);
            body["object"] = p.chat ? "chat.completion.chunk" : "text_completion";
            body["choices"] = json::array();
            if (!write(sink, *r, event(body))) return false;
          }
          if (!write(sink, *r, "data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        }
        if (Clock::now() - r->last_write > std::chrono::seconds(1)) return write(sink, *r, ": keep-alive\n\n");
        return true;
      },
      release);
}

int HttpServer::start() {
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let two servers share the port).
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int port = options_.port;
  if (port == 0) port = server_->bind_to_any_port(options_.host);
  else if (!server_->bind_to_port(options_.host, port)) port = -1;
  if (port < 0)
    throw Error(str("serve: cannot listen on ", options_.host, ":", options_.port, " (in use, or not this host's address)"));
  server_->start_serving();
  return port;
}

void HttpServer::stop() { server_->stop_serving(); }

}  // namespace linnet::serve
