// The text of one completion as it is generated, for `linnet generate` and `linnet serve`
// alike: decoded token by token (the prompt read first, so the first token keeps the space a
// SentencePiece vocabulary drops at the start of a text; special tokens give no text), cut
// where a stop string first appears, and — for a stream — how much of it may be sent while a
// stop string could still complete (the hold-back). With a reasoning parser the tokens of the
// reasoning go to reasoning() instead (no stop string is looked for there, nothing held back)
// and the format's markup to neither; tool calls' bodies go to tool_calls().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/reasoning.h"
#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace linnet::engine {

// vLLM's skip_special_tokens and include_stop_str_in_output.
struct TextOptions {
  bool skip_special = true;       // special tokens give no text
  bool include_stop_str = false;  // the stop string (or the stopping token's text) stays in the text
  int64_t min_tokens = 0;         // no stop string is looked for before this many tokens
};

class CompletionText {
 public:
  CompletionText(const Tokenizer& tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop,
                 TextOptions options = {}, std::unique_ptr<ReasoningParser> reasoning = nullptr);

  // One generated token; true once a stop string has appeared (the text is cut before it, or
  // after it with include_stop_str).
  bool push(int32_t token);
  // The end of the completion `c` (its last token never went through push when EOS or a stop
  // id ended it: its text joins only with include_stop_str), then what the decoder still holds.
  void finish(const Completion& c);

  const std::string& text() const { return text_; }
  const std::string& reasoning() const { return reasoning_; }
  // Harmony's messages to a recipient: (recipient, body), in order.
  const std::vector<std::pair<std::string, std::string>>& tool_calls() const { return tool_calls_; }
  bool stopped() const { return stopped_; }
  // The stop string that ended it ("" when none did).
  const std::string& stop_string() const { return stop_string_; }
  // Bytes of text() that no stop string can still take back: all but the longest end of it
  // that is the start of a stop string.
  size_t releasable() const;

 private:
  // The decoder of the part `token` belongs to; at a change of part the previous one is flushed.
  Decoder& decoder_for(Part part);

  Decoder decoder_;
  std::string text_;
  std::unique_ptr<ReasoningParser> parser_;
  Decoder reasoning_decoder_, tool_decoder_;
  std::string reasoning_;
  std::vector<std::pair<std::string, std::string>> tool_calls_;
  Part last_ = Part::content;
  std::vector<std::string> stop_;
  TextOptions options_;
  int64_t pushed_ = 0;
  bool stopped_ = false;
  std::string stop_string_;
};

}  // namespace linnet::engine
