// Every request field linnet knows, by vLLM's (and OpenAI's) names, and what each way in does
// with it: a line of `linnet generate`, a /v1/completions body, a /v1/chat/completions body
// (run-batch's bodies are the server's). The one table docs/serve.md prints and the tests walk;
// the checks themselves live where the field is read (engine/request_rules, serve/openai_api).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace linnet::engine {

enum class Route { generate_line, completions, chat };

// What a route does with a field.
enum class Handling {
  absent,    // not a field of this route: a generate line refuses it, the server warns once and ignores it
  honoured,  // read, checked and acted on
  refused,   // a 400 (an error line) naming it unless it holds its neutral value (`neutral`)
  accepted,  // read and checked, with no effect on the answer (`why` says why that is right)
};

struct RequestField {
  const char* name;
  Handling generate_line, completions, chat;
  const char* probe;    // a value other than the default, as JSON (what the tests send)
  const char* neutral;  // refused fields: the value(s) that are accepted, in words
  const char* what;     // one line for docs/serve.md
  Handling on(Route r) const { return r == Route::generate_line ? generate_line : r == Route::completions ? completions : chat; }
};

const std::vector<RequestField>& request_fields();
// The fields a route knows (every Handling but absent).
std::vector<std::string> field_names(Route route);
// The keys of `body` the route does not know: logged once per name (as vLLM warns of fields it
// ignores); returns them.
std::vector<std::string> warn_unknown_fields(const nlohmann::json& body, Route route);
const char* route_name(Route r);

}  // namespace linnet::engine
