// Chat templates as transformers 5.24.0 applies them (tokenizer.apply_chat_template with
// tokenize=False), rendered by linnet's own jinja engine (chat/jinja/).
//
// What this follows, from transformers' tokenization_utils_base.py and
// utils/chat_template_utils.py:
//
// Loading (PreTrainedTokenizerBase._from_pretrained, .__init__):
//   - tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}
//     that becomes a dict of named templates;
//   - chat_template.jinja beside it replaces the config's templates (as "default"), and every
//     additional_chat_templates/NAME.jinja adds template NAME; when the files give only a
//     default, the tokenizer holds a single template, else a dict.
//   - the variables the template sees beside the messages are special_tokens_map: bos_token,
//     eos_token, unk_token, sep_token, pad_token, cls_token, mask_token (those set, as strings;
//     an AddedToken dict gives its "content"), then the names of a dict "extra_special_tokens".
//     transformers also fills special tokens that a tokenizer class sets by default (a
//     LlamaTokenizer's "<unk>"…); only what the files say is known here.
// Choosing (get_chat_template): with a dict of templates, "tool_use" when tools are given
//   and it exists, else "default", else an error naming the templates; a name can be asked for.
// Rendering (apply_chat_template, render_jinja_template):
//   - an empty conversation is refused; every message must be an object; keys whose value is
//     null are dropped from each message (top level only);
//   - continue_final_message together with add_generation_prompt is refused;
//   - reasoning is aliased: a message with reasoning_content, thinking or reasoning (first
//     non-null in that order) becomes {"thinking": r, ...message, "reasoning_content": r};
//   - the template renders with messages, tools (null when not given), documents (null when
//     not given), add_generation_prompt, then the special tokens, then the extra kwargs (which
//     replace special tokens of the same name);
//   - continue_final_message: the final message's field (default "content"; the last text
//     part of a list content) gets "CONTINUE_FINAL_MESSAGE_TAG " appended before rendering,
//     and the rendered text is cut at the tag (rstripped when the template trimmed the space);
//   - the jinja2 environment: ImmutableSandboxedEnvironment(trim_blocks=True,
//     lstrip_blocks=True, extensions=[AssistantTracker ({% generation %}), loopcontrols]),
//     tojson = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), globals
//     raise_exception, strftime_now (datetime.now().strftime), dict, namespace (no
//     underscore-prefixed attributes).
// Tokenizing the result: transformers encodes the rendered text with add_special_tokens=False,
//   so a BOS the template writes is the only BOS (no second one from the tokenizer).
#pragma once
#include <ctime>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/jinja/jinja.h"

namespace linnet {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // a list of JSON schemas
  std::optional<nlohmann::ordered_json> documents;  // a list of objects
  bool add_generation_prompt = false;
  // Render the last message open, for the model to continue: the field to continue
  // ("content" for continue_final_message=True).
  std::optional<std::string> continue_final_message;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // e.g. enable_thinking
  std::optional<std::string> template_name;                          // a named template to use
};

class ChatTemplate {
 public:
  // One template, or named ones ("default", "tool_use", …); special_tokens is the object of
  // string variables the template sees (bos_token, eos_token, …).
  ChatTemplate(std::map<std::string, std::string> templates, nlohmann::ordered_json special_tokens, bool named = true);
  static ChatTemplate single(std::string source, nlohmann::ordered_json special_tokens);

  // The checkpoint's templates and special tokens, as transformers loads them from DIR
  // (tokenizer_config.json, chat_template.jinja, additional_chat_templates/). With
  // override_file, that file's text is the only template. Throws linnet::Error naming what
  // is missing when DIR has no chat template.
  static ChatTemplate load(const std::string& dir, const std::string& override_file = "");

  // Which template a request renders with (get_chat_template).
  const std::string& source(bool with_tools, const std::optional<std::string>& name = std::nullopt) const;

  // The prompt text. Throws jinja::TemplateError (the template does not parse),
  // jinja::RaiseError (the template refused the conversation), jinja::RenderError (also past
  // one of `limits`; jinja::Cancelled when limits.cancelled said so), or linnet::Error (the
  // request itself is refused, as transformers refuses it).
  std::string render(const ChatRequest& request, const jinja::Limits& limits = {}) const;

  // Whether that template loops over a message's content (`{% for part in message['content'] %}`):
  // it reads content as a list of parts. This is vLLM's "auto" content format ("openai" when
  // true, else "string"), found as vLLM finds it on the parsed template; the others get text
  // parts joined into one string (engine/chat_request.h). False for a template that does not parse.
  bool iterates_content(bool with_tools, const std::optional<std::string>& name = std::nullopt) const;

  // "" when every template parses, else the first that does not: "template 'NAME': line L, column C: …".
  std::string problem() const;

  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  // The time strftime_now formats (default: the real clock).
  void set_clock(std::function<std::time_t()> now) { now_ = std::move(now); }

 private:
  std::map<std::string, std::string> templates_;
  bool named_;
  nlohmann::ordered_json special_tokens_;
  std::function<std::time_t()> now_;
  // Parsed once when made (render is then safe from several threads); a template that does
  // not parse keeps its error, thrown when it is used.
  std::map<std::string, std::optional<jinja::Template>> compiled_;
  std::map<std::string, std::string> parse_errors_;
  std::map<std::string, bool> content_loops_;

  // What the template sees (messages as transformers shapes them, tools, documents,
  // add_generation_prompt, special tokens, kwargs); `text` is the template's source and
  // final_message the text continue_final_message continues.
  jinja::Variables variables(const ChatRequest& request, const std::string& text, std::string& final_message) const;
};

}  // namespace linnet
