// A conversation as a generation request, for every way in: a /v1/chat/completions or
// /tokenize body, a run-batch line, a `linnet generate` line with `messages`, and
// `linnet apply-chat-template`. The fields the chat template reads, checked and named as
// the request rules name theirs (engine/request_rules.h: FieldError), and the prompt they
// render to — the template's text, tokenized without adding BOS (the template writes it;
// transformers' apply_chat_template and vLLM encode it with add_special_tokens=False).
//
// Content as vLLM's "auto" content format shapes it: a list of {"type": "text"} parts goes to
// a template that loops over a message's content as it is, and to any other as one string,
// the texts joined by "\n". Parts of another type (image_url, input_audio, …) are refused:
// linnet serves text models.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace linnet::engine {

// `messages` (required: a non-empty list of objects with a string `role`; content a string,
// null or a list of text parts), `add_generation_prompt` (default true),
// `continue_final_message` (default false; when true, add_generation_prompt defaults to
// false and both true is refused), `chat_template_kwargs` (an object: enable_thinking, …),
// `documents` (a list of objects), `tools` (a list of JSON schemas: the server refuses them
// before this; apply-chat-template renders them). template_name: one of the checkpoint's
// named templates. Throws FieldError naming the field and index.
ChatRequest read_chat_request(const nlohmann::ordered_json& j, const ChatTemplate& chat,
                              const std::optional<std::string>& template_name = std::nullopt);

struct ChatPrompt {
  std::string text;          // as the template renders it
  std::vector<int32_t> ids;  // the text's tokens, no BOS added
};
// Renders and tokenizes (ids checked against Vocab). The template refusing the conversation
// is a FieldError on "messages" whose message is the template's own (raise_exception), or
// says how the template failed (it does not parse, fails on this conversation, or goes past
// the render's limits, jinja::Limits). `cancelled`, when given, is asked every few thousand
// steps of the render whether to stop: true ends it with jinja::Cancelled.
ChatPrompt chat_prompt(const ChatTemplate& chat, const ChatRequest& request, const Tokenizer& tok, int64_t vocab,
                       const std::function<bool()>& cancelled = {});

}  // namespace linnet::engine
