#include "engine/chat_request.h"

#include "engine/request_rules.h"

namespace linnet::engine {

using ojson = nlohmann::ordered_json;

namespace {

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }
bool given(const ojson& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

bool boolean(const ojson& j, const char* key, bool fallback) {
  if (!given(j, key)) return fallback;
  if (!j[key].is_boolean()) throw FieldError(key, str("`", key, "` must be true or false, got ", dump(j[key])));
  return j[key].get<bool>();
}

// One message's content as the template will see it.
ojson content_of(const ojson& content, const std::string& where, bool as_parts) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array())
    throw FieldError("messages", str("`", where, "` must be a string, null or a list of content parts, got ", dump(content)));
  std::string joined;
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    const std::string at = str(where, "[", k, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw FieldError("messages", str("`", at, "` must be an object with a \"type\", got ", dump(part)));
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      throw FieldError("messages", str("`", at, ".type` = \"", type, "\" is not supported: linnet serves text models "
                                       "(content parts of type \"text\" only)"));
    if (!part.contains("text") || !part["text"].is_string())
      throw FieldError("messages", str("`", at, ".text` must be a string"));
    if (k) joined += "\n";
    joined += part["text"].get<std::string>();
  }
  return as_parts ? content : ojson(joined);
}

}  // namespace

ChatRequest read_chat_request(const ojson& j, const ChatTemplate& chat, const std::optional<std::string>& template_name) {
  if (!given(j, "messages")) throw FieldError("messages", "`messages` is required: a list of {\"role\", \"content\"} objects");
  const ojson& messages = j["messages"];
  if (!messages.is_array() || messages.empty())
    throw FieldError("messages", str("`messages` must be a non-empty list of {\"role\", \"content\"} objects, got ",
                                     messages.is_array() ? std::string("[]") : dump(messages)));
  ChatRequest r;
  r.template_name = template_name;
  if (given(j, "tools")) {
    const ojson& t = j["tools"];
    if (!t.is_array()) throw FieldError("tools", str("`tools` must be a list of JSON schemas, got ", dump(t)));
    for (size_t i = 0; i < t.size(); ++i)
      if (!t[i].is_object()) throw FieldError("tools", str("`tools[", i, "]` must be an object (a JSON schema), got ", dump(t[i])));
    r.tools = t;
  }
  bool as_parts = false;
  try {
    as_parts = chat.iterates_content(r.tools.has_value(), template_name);
  } catch (const Error& e) {  // several named templates and no default, or no such name
    throw FieldError("messages", e.what());
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string where = str("messages[", i, "]");
    if (!m.is_object()) throw FieldError("messages", str("`", where, "` must be an object with a \"role\", got ", dump(m)));
    if (!m.contains("role") || !m["role"].is_string())
      throw FieldError("messages", str("`", where, ".role` must be a string (\"system\", \"user\", \"assistant\", …), got ",
                                       m.contains("role") ? dump(m["role"]) : std::string("none")));
    ojson message = m;
    if (m.contains("content")) message["content"] = content_of(m["content"], where + ".content", as_parts);
    r.messages.push_back(std::move(message));
  }
  const bool cont = boolean(j, "continue_final_message", false);
  r.add_generation_prompt = boolean(j, "add_generation_prompt", !cont);
  if (cont && r.add_generation_prompt)
    throw FieldError("continue_final_message",
                     "`continue_final_message` and `add_generation_prompt` cannot both be true: the final message is "
                     "either continued or followed by the assistant's turn");
  if (cont) r.continue_final_message = "content";
  if (given(j, "chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object())
      throw FieldError("chat_template_kwargs", str("`chat_template_kwargs` must be an object (e.g. {\"enable_thinking\": "
                                                   "false}), got ", dump(j["chat_template_kwargs"])));
    r.kwargs = j["chat_template_kwargs"];
  }
  // OpenAI's and vLLM's top-level reasoning_effort: the template variable of that name (gpt-oss's
  // harmony template reads it: "Reasoning: low|medium|high"), unless chat_template_kwargs sets it.
  if (given(j, "reasoning_effort")) {
    const ojson& e = j["reasoning_effort"];
    if (!e.is_string() || (e != "low" && e != "medium" && e != "high"))
      throw FieldError("reasoning_effort", str("`reasoning_effort` must be \"low\", \"medium\" or \"high\", got ", dump(e)));
    if (r.kwargs.contains("reasoning_effort") && r.kwargs["reasoning_effort"] != e)
      throw FieldError("reasoning_effort", str("`reasoning_effort` ", dump(e), " and chat_template_kwargs.reasoning_effort ",
                                               dump(r.kwargs["reasoning_effort"]), " disagree"));
    r.kwargs["reasoning_effort"] = e;
  }
  if (given(j, "documents")) {
    const ojson& d = j["documents"];
    if (!d.is_array()) throw FieldError("documents", str("`documents` must be a list of objects, got ", dump(d)));
    for (size_t i = 0; i < d.size(); ++i)
      if (!d[i].is_object()) throw FieldError("documents", str("`documents[", i, "]` must be an object, got ", dump(d[i])));
    r.documents = d;
  }
  return r;
}

ChatPrompt chat_prompt(const ChatTemplate& chat, const ChatRequest& request, const Tokenizer& tok, int64_t vocab,
                       const std::function<bool()>& cancelled) {
  ChatPrompt p;
  jinja::Limits limits;
  limits.cancelled = cancelled;
  try {
    p.text = chat.render(request, limits);
  } catch (const jinja::Cancelled&) {  // nobody waits for the answer: not the request's fault
    throw;
  } catch (const jinja::RaiseError& e) {  // the template's own words
    throw FieldError("messages", e.what());
  } catch (const jinja::TemplateError& e) {
    throw FieldError("messages", str("the chat template does not parse: ", e.what()));
  } catch (const jinja::RenderError& e) {
    throw FieldError("messages", str("the chat template failed on this conversation: ", e.what()));
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {  // refused as transformers refuses it
    throw FieldError("messages", e.what());
  }
  p.ids = encode_text(tok, p.text, false, vocab, "messages");
  if (p.ids.empty()) throw FieldError("messages", "the conversation renders to no tokens (the chat template wrote nothing)");
  return p;
}

}  // namespace linnet::engine
