#include "chat/chat_template.h"

#include <filesystem>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "chat/jinja/ast.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

namespace linnet {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

const char* kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";
const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};
const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

const jinja::Options kTransformersOptions{.trim_blocks = true, .lstrip_blocks = true, .keep_trailing_newline = false};

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object.
std::optional<std::string> token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

ojson special_tokens_of(const ojson& config) {
  ojson out = ojson::object();
  for (const char* key : kSpecialTokens)
    if (config.contains(key))
      if (auto t = token_text(config[key])) out[key] = *t;
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object())
    for (auto it = config["extra_special_tokens"].begin(); it != config["extra_special_tokens"].end(); ++it)
      if (auto t = token_text(it.value())) out[it.key()] = *t;
  return out;
}

// A message as the template sees it, made in one pass over its keys (constant-time dict
// inserts: a message with many thousand keys costs linear time): keys whose value is null
// dropped, reasoning aliased as _alias_reasoning_fields does ({"thinking": r, **message,
// "reasoning_content": r}).
jinja::Value message_value(const ojson& message) {
  const ojson* reasoning = nullptr;
  for (const char* key : kReasoningFields)
    if (auto it = message.find(key); it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  auto d = std::make_shared<jinja::Dict>();
  if (reasoning) d->set(jinja::Value("thinking"), jinja::from_json(*reasoning));
  for (auto it = message.begin(); it != message.end(); ++it)
    if (!it.value().is_null()) d->set(jinja::Value(it.key()), jinja::from_json(it.value()));
  if (reasoning) d->set(jinja::Value("reasoning_content"), jinja::from_json(*reasoning));
  return jinja::Value::dict(std::move(d));
}

// vLLM's "auto" chat template content format (vllm/entrypoints/chat_utils.py,
// _detect_content_format), asked of the parsed template: "openai" (content reaches the template
// as its list of parts) when some {% for %} loops over a message's content, else "string" (text
// parts joined). The same walk as vLLM's over jinja2's tree:
//   1. the names that hold the messages: `messages`, and every `{% set x = y %}` whose value
//      reads one of them (y, y|filter, y is test, y[a:b]), again and again;
//   2. the names that hold a message: the targets of `{% for m in y %}` over those;
//   3. the first loop, in the template's order, over a message's content (m.content,
//      m['content'], through filters, tests and slices as above) or over a plain `content`.
// vLLM asserts that each such target is one plain name; where one is not (`{% set a, b = … %}`,
// `{% set ns.x = … %}`, `{% for k, v in … %}`) its assertion fails and it falls back to
// "string", and so does this. (One difference: vLLM would loop forever on assignments that
// feed each other in a circle; here each name is taken once.)
namespace content_format {

using jinja::Body;
using jinja::Expr;
using jinja::Stmt;
using Kind = Expr::Kind;

struct NotOneName {};  // a target vLLM's assertion would refuse

bool is_name(const Expr* e, const std::string& name) { return e && e->kind == Kind::Name && e->name == name; }

// e reads `name` (key: name.key or name['key']), possibly through filters, a test or a slice.
bool reads(const Expr* e, const std::string& name, const std::string* key) {
  if (!e) return false;
  switch (e->kind) {
    case Kind::Filter:
    case Kind::Slice:
      return reads(e->a.get(), name, key);
    case Kind::Test:  // `x is not t` is jinja2's Not(Test(…)): not looked through
      return !e->negated && reads(e->a.get(), name, key);
    case Kind::Getattr:
      return key && is_name(e->a.get(), name) && e->name == *key;
    case Kind::Getitem:
      return key && is_name(e->a.get(), name) && e->b && e->b->kind == Kind::Const && e->b->value.is_string() &&
             e->b->value.as_string() == *key;
    default:
      return !key && is_name(e, name);
  }
}

const std::string& one_name(const jinja::Target& t) {
  if (t.names.size() != 1 || t.unpack || !t.attr.empty()) throw NotOneName{};
  return t.names[0];
}

// Every statement, each before those inside it, in the template's order (jinja2's find_all).
void walk(const Body& body, const std::function<void(const Stmt&)>& f) {
  for (const auto& s : body) {
    f(*s);
    for (const auto& [cond, branch] : s->branches) walk(branch, f);
    walk(s->body, f);
    walk(s->else_body, f);
    if (s->macro) walk(s->macro->body, f);
  }
}

bool loops_over_parts(const jinja::Program& program) {
  std::vector<std::string> lists = {"messages"};
  std::set<std::string> seen = {"messages"};
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::string list = lists[i];  // (lists grows below)
    walk(program.body, [&](const Stmt& s) {
      if (s.kind == Stmt::Kind::Set && reads(s.expr.get(), list, nullptr) && seen.insert(one_name(s.target)).second)
        lists.push_back(one_name(s.target));
    });
  }
  std::vector<std::string> messages;
  walk(program.body, [&](const Stmt& s) {
    if (s.kind != Stmt::Kind::For) return;
    for (const auto& list : lists)
      if (reads(s.expr.get(), list, nullptr)) {
        messages.push_back(one_name(s.target));
        break;
      }
  });
  static const std::string kContent = "content";
  bool found = false;
  walk(program.body, [&](const Stmt& s) {
    if (found || s.kind != Stmt::Kind::For) return;
    bool over_content = is_name(s.expr.get(), kContent);
    for (const auto& m : messages) over_content = over_content || reads(s.expr.get(), m, &kContent);
    if (over_content) {
      one_name(s.target);
      found = true;
    }
  });
  return found;
}

}  // namespace content_format

std::string py_strip(const std::string& s) { return jinja::pystr::strip(s, std::nullopt, true, true); }

}  // namespace

ChatTemplate::ChatTemplate(std::map<std::string, std::string> templates, ojson special_tokens, bool named)
    : templates_(std::move(templates)), named_(named), special_tokens_(std::move(special_tokens)) {
  if (templates_.empty()) throw Error("no chat template given");
  for (const auto& [name, text] : templates_) {
    try {
      compiled_[name] = jinja::Template::parse(text, kTransformersOptions);
      try {
        content_loops_[name] = content_format::loops_over_parts(compiled_[name]->program());
      } catch (const content_format::NotOneName&) {
        content_loops_[name] = false;
      }
    } catch (const jinja::TemplateError& e) {
      content_loops_[name] = false;  // as vLLM's: a template it cannot parse gets strings
      compiled_[name] = std::nullopt;
      parse_errors_[name] = e.what();
    }
  }
}

ChatTemplate ChatTemplate::single(std::string source, ojson special_tokens) {
  return ChatTemplate({{"default", std::move(source)}}, std::move(special_tokens), false);
}

ChatTemplate ChatTemplate::load(const std::string& dir, const std::string& override_file) {
  fs::path root(dir);
  ojson config = ojson::object();
  fs::path config_path = root / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    std::string text = read_text_file(config_path.string(), "tokenizer config");
    try {
      config = ojson::parse(text);
    } catch (const std::exception& e) {
      throw Error(str(config_path.string(), ": not valid JSON: ", e.what()));
    }
    if (!config.is_object()) throw Error(config_path.string() + ": the tokenizer config is not a JSON object");
  }
  ojson special = special_tokens_of(config);
  if (!override_file.empty()) return single(read_text_file(override_file, "chat template"), special);

  // Template files take priority over the config's entries.
  std::map<std::string, std::string> files;
  fs::path jinja_file = root / "chat_template.jinja";
  if (fs::exists(jinja_file)) files["default"] = read_text_file(jinja_file.string(), "chat template");
  fs::path extra_dir = root / "additional_chat_templates";
  if (fs::is_directory(extra_dir))
    for (const auto& entry : fs::directory_iterator(extra_dir))
      if (entry.path().extension() == ".jinja")
        files[entry.path().stem().string()] = read_text_file(entry.path().string(), "chat template");
  if (files.size() == 1 && files.count("default")) return single(files["default"], special);
  if (!files.empty()) return ChatTemplate(std::move(files), special, true);

  if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const ojson& t = config["chat_template"];
    if (t.is_string()) return single(t.get<std::string>(), special);
    if (t.is_array()) {
      std::map<std::string, std::string> named;
      for (const auto& entry : t) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
            !entry["template"].is_string())
          throw Error(config_path.string() + ": chat_template entries must be {\"name\": …, \"template\": …}");
        named[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
      }
      if (named.empty()) throw Error(config_path.string() + ": chat_template is an empty list");
      return ChatTemplate(std::move(named), special, true);
    }
    throw Error(config_path.string() + ": chat_template must be a string or a list of named templates");
  }
  throw Error(str(dir, ": no chat template (none in tokenizer_config.json, no chat_template.jinja, no additional_chat_templates/)"));
}

const std::string& ChatTemplate::source(bool with_tools, const std::optional<std::string>& name) const {
  if (!named_) {
    if (name && *name != "default")
      throw Error(str("no chat template named '", *name, "': this tokenizer has a single chat template"));
    return templates_.begin()->second;
  }
  if (name) {
    auto it = templates_.find(*name);
    if (it == templates_.end()) {
      std::string names;
      for (const auto& [n, t] : templates_) names += (names.empty() ? "" : ", ") + n;
      throw Error(str("no chat template named '", *name, "' (this tokenizer has: ", names, ")"));
    }
    return it->second;
  }
  if (with_tools && templates_.count("tool_use")) return templates_.at("tool_use");
  if (templates_.count("default")) return templates_.at("default");
  std::string names;
  for (const auto& [n, t] : templates_) names += (names.empty() ? "" : ", ") + n;
  throw Error("This model has multiple chat templates with no default specified; pass the name of one: " + names);
}

std::string ChatTemplate::problem() const {
  if (parse_errors_.empty()) return "";
  const auto& [name, why] = *parse_errors_.begin();
  return named_ ? str("template '", name, "': ", why) : why;
}

bool ChatTemplate::iterates_content(bool with_tools, const std::optional<std::string>& name) const {
  const std::string& text = source(with_tools, name);
  for (const auto& [n, t] : templates_)
    if (&t == &text) return content_loops_.at(n);
  return false;
}

jinja::Variables ChatTemplate::variables(const ChatRequest& request, const std::string& text,
                                         std::string& final_message) const {
  jinja::List chat;
  chat.reserve(request.messages.size());
  for (const auto& m : request.messages) {
    if (!m.is_object()) throw Error("Chat messages should be dicts, but got " + m.dump());
    chat.push_back(message_value(m));
  }

  if (request.continue_final_message) {
    const std::string& field = *request.continue_final_message;
    jinja::Dict& last = chat.back().dict_ref();
    const jinja::Value* found = last.find(jinja::Value(field));  // null values are gone already
    if (!found) throw Error("continue_final_message is set but the final message has no \"" + field + "\" to continue!");
    const jinja::Value final_value = *found;
    std::vector<std::string> fields = {field};
    if (field == "reasoning_content" || field == "thinking" || field == "reasoning") {
      fields.clear();
      for (const char* f : kReasoningFields)
        if (const jinja::Value* v = last.find(jinja::Value(f)); v && jinja::equals(*v, final_value)) fields.push_back(f);
    }
    bool mentioned = false;
    for (const auto& f : fields) mentioned = mentioned || text.find(f) != std::string::npos;
    if (!mentioned) throw Error("continue_final_message is set to \"" + field + "\" but this is not an accepted field in the chat_template");
    if (final_value.is_list()) {
      bool found_text = false;
      const jinja::List& parts = final_value.items();
      for (auto it = parts.rbegin(); it != parts.rend() && !found_text; ++it) {
        if (!it->is_dict()) continue;
        jinja::Dict& part = it->dict_ref();
        const jinja::Value* part_text = part.find(jinja::Value("text"));
        if (!part_text) continue;
        const jinja::JsonStyle compact{.indent = std::nullopt, .item_separator = ",", .key_separator = ":"};
        final_message = part_text->is_string() ? part_text->as_string() : jinja::dumps(*part_text, compact);
        part.set(jinja::Value("text"), jinja::Value(final_message + kContinueTag));
        found_text = true;
      }
      if (!found_text) throw Error("continue_final_message is set but we could not find any text to continue in the final message!");
    } else {
      if (!final_value.is_string()) throw Error("continue_final_message: the final message's " + field + " is not text");
      final_message = final_value.as_string();
      for (const auto& f : fields) last.set(jinja::Value(f), jinja::Value(final_message + kContinueTag));
    }
  }

  // The variables in transformers' order: later ones replace earlier ones of the same name.
  jinja::Variables context;
  context.reserve(4 + special_tokens_.size() + request.kwargs.size());
  context.emplace_back("messages", jinja::Value::list(std::move(chat)));
  context.emplace_back("tools", request.tools ? jinja::from_json(*request.tools) : jinja::Value::none());
  context.emplace_back("documents", request.documents ? jinja::from_json(*request.documents) : jinja::Value::none());
  context.emplace_back("add_generation_prompt", jinja::Value(request.add_generation_prompt));
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
    context.emplace_back(it.key(), jinja::from_json(it.value()));
  for (auto it = request.kwargs.begin(); it != request.kwargs.end(); ++it) {
    const std::string& k = it.key();
    if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
      throw Error("render() got multiple values for keyword argument '" + k + "'");
    context.emplace_back(k, jinja::from_json(it.value()));
  }
  return context;
}

std::string ChatTemplate::render(const ChatRequest& request, const jinja::Limits& limits) const {
  const std::string& text = source(request.tools.has_value(), request.template_name);
  std::string name;
  for (const auto& [n, t] : templates_)
    if (&t == &text) name = n;
  if (!compiled_.at(name)) throw jinja::TemplateError(parse_errors_.at(name));
  const jinja::Template& tmpl = *compiled_.at(name);

  if (!request.messages.is_array()) throw Error("messages must be a list of messages");
  if (request.messages.empty()) throw Error("Cannot apply chat template to an empty conversation. Provide at least one message.");
  if (request.continue_final_message && request.add_generation_prompt)
    throw Error("continue_final_message and add_generation_prompt are not compatible");
  if (request.tools && !request.tools->is_array()) throw Error("tools must be a list of JSON schemas");
  if (request.tools)
    for (const auto& tool : *request.tools)
      if (!tool.is_object()) throw Error("Tools should either be a JSON schema, or a callable function with type hints");
  if (request.documents) {
    if (!request.documents->is_array()) throw Error("documents must be a list of objects");
    for (const auto& d : *request.documents)
      if (!d.is_object()) throw Error("Documents should be a list of dicts with 'title' and 'text' keys!");
  }
  if (!request.kwargs.is_object()) throw Error("chat template kwargs must be an object");

  // The request as values (json → Value); a conversion error (JSON nested too deep for the
  // recursion limit) is the render's error.
  jinja::Variables context;
  std::string final_message;
  try {
    context = variables(request, text, final_message);
  } catch (const jinja::EvalError& e) {
    throw jinja::RenderError(str("the chat request: ", e.what()));
  }
  std::string rendered = tmpl.render_values(context, {{"strftime_now", jinja::strftime_now_function(now_)}}, limits);

  if (request.continue_final_message) {
    std::string tag = py_strip(kContinueTag);
    if (rendered.find(py_strip(final_message)) == std::string::npos || rendered.find(tag) == std::string::npos)
      throw Error("continue_final_message is set but the final message does not appear in the chat after applying the chat template");
    auto at = rendered.rfind(tag);
    if (rendered.compare(at, std::string(kContinueTag).size(), kContinueTag) == 0) rendered.resize(at);
    else rendered = jinja::pystr::strip(rendered.substr(0, at), std::nullopt, false, true);
  }
  return rendered;
}

}  // namespace linnet
