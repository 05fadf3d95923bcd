// Reasoning parsers: which part of a chat answer each generated token belongs to — the
// reasoning (message.reasoning_content), the answer (content), or the format's own markup
// (no text anywhere) — decided token by token so a stream can send each part as it comes.
// vLLM's --reasoning-parser names:
//   gpt_oss      the harmony format: `<|channel|>analysis<|message|>…<|end|>` is reasoning,
//                `<|channel|>final<|message|>…` the answer; a `commentary` message without a
//                recipient (a preamble) is answer text; one `to=functions.NAME` is a tool
//                call; one to a built-in tool (browser, python) is reasoning.
//   deepseek_r1  `<think>` (optional: R1's template puts it in the prompt) … `</think>`, then
//                the answer; an answer that never closes its thinking is all reasoning.
//   qwen3        as deepseek_r1, except that with enable_thinking false (the template then
//                writes an empty think block into the prompt) everything is the answer.
// The markers are found by their text in the vocabulary: each must be one token.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace linnet::engine {

enum class Part { content, reasoning, tool_call, markup };

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // The part `token` belongs to; markup tokens change the state.
  virtual Part route(TokenId token) = 0;
  // For a harmony tool call: the message's recipient ("functions.get_weather"), else "".
  virtual std::string recipient() const { return ""; }
};

// The parsers linnet has, by vLLM's name.
const std::vector<std::string>& reasoning_parser_names();
// A parser for one completion; `thinking` is false when the request turned thinking off
// (qwen3's enable_thinking). Throws linnet::Error naming the parser and the marker the
// vocabulary lacks, or the unknown name and the known ones.
std::unique_ptr<ReasoningParser> make_reasoning_parser(const std::string& name, const Tokenizer& tok,
                                                       bool thinking = true);
// The parser a chat template implies where that is unambiguous (the harmony format's
// `<|channel|>` markup: gpt_oss), else "".
std::string reasoning_parser_for_template(const std::string& template_source);

}  // namespace linnet::engine
