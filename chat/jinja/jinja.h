// A Jinja template engine that renders as Python's jinja2 does under the settings Hugging Face
// chat templates run with (transformers' ImmutableSandboxedEnvironment: no autoescape, no
// mutating methods). Values follow Python's semantics (value.h); output is byte for byte
// what jinja2 prints. docs/chat_templates.md lists what is supported.
//
//   auto t = jinja::Template::parse(source, {.trim_blocks = true, .lstrip_blocks = true});
//   std::string text = t.render(context);  // context: a JSON object of the template's variables
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "chat/jinja/value.h"

namespace linnet::jinja {

struct Options {
  bool trim_blocks = false;    // drop the first newline after a block tag
  bool lstrip_blocks = false;  // drop spaces and tabs before a block tag on its own line
  bool keep_trailing_newline = false;
};

// A template that does not parse: "line L, column C: what". jinja2 also refuses unknown
// filters and tests when it compiles (unless they sit in an if branch), so does parse().
class TemplateError : public linnet::Error {
 public:
  using linnet::Error::Error;
};

// A template that fails while rendering: "line L: what" (calling an undefined value, a type
// error, a refused method such as list.append).
class RenderError : public linnet::Error {
 public:
  using linnet::Error::Error;
};

// A render stopped because Limits::cancelled said so (the client went away): no output.
class Cancelled : public RenderError {
 public:
  using RenderError::RenderError;
};

// raise_exception(message) called by the template; what() is the message as given.
class RaiseError : public linnet::Error {
 public:
  using linnet::Error::Error;
};

// Bounds on one render, each failing it with a RenderError that names the limit (a 400 on
// the server), and a way to stop it. The defaults are far above what real chat templates
// need (docs/chat_templates.md, "Limits").
struct Limits {
  // The most text a render makes at once: its output, and any string along the way (a `~`, a
  // filter's result, a macro's output…); a list counts its items at sizeof(Value) each.
  std::size_t max_bytes = std::size_t{64} << 20;
  // Work: each statement, expression, loop iteration and item a filter walks is a step, and
  // making values (text, list items, dict copies) costs a step per 16 bytes.
  std::int64_t max_steps = 20'000'000;
  // Called every 4,096 steps; true stops the render with Cancelled.
  std::function<bool()> cancelled;
};

// Names the template can call or read besides its context, e.g. {"strftime_now", fn}.
using Globals = std::vector<std::pair<std::string, Value>>;
// A context as values: name and value, in order (a later name replaces an earlier one).
using Variables = std::vector<std::pair<std::string, Value>>;

// strftime_now(format) as transformers defines it (datetime.now().strftime), at time `now`
// (local time) or at the real current time when now is empty.
Value strftime_now_function(std::function<std::time_t()> now = {});

// Values to and from JSON (ints stay ints, floats floats, objects keep their order).
Value from_json(const nlohmann::ordered_json& j);

struct Program;

class Template {
 public:
  static Template parse(std::string_view source, const Options& options = {});

  // Renders with `context`'s keys as variables, then `globals` (raise_exception, namespace,
  // dict, range and strftime_now are always there; a global of the same name replaces them).
  std::string render(const nlohmann::ordered_json& context, const Globals& globals = {}, const Limits& limits = {}) const;
  // The same with the context already made values (ChatTemplate builds them in one pass).
  std::string render_values(const Variables& context, const Globals& globals = {}, const Limits& limits = {}) const;

  // The parsed template (ast.h), for code that asks what a template does without running it.
  const Program& program() const { return *program_; }

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace linnet::jinja
