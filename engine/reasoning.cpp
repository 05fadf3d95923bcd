#include "engine/reasoning.h"

#include <algorithm>

#include "core/error.h"

namespace linnet::engine {

namespace {

// The id of `text` where the vocabulary has it as one token (an added or special token).
TokenId single_token(const Tokenizer& tok, const std::string& parser, const std::string& text) {
  const std::vector<TokenId> ids = tok.encode(text);
  if (ids.size() != 1 || tok.decode(ids) != text)
    throw Error(str("--reasoning-parser ", parser, ": the vocabulary has no token `", text, "` (", ids.size(),
                    " tokens), so this model does not write that format"));
  return ids[0];
}

// The harmony format (gpt-oss). The answer starts inside a header (the prompt ends with
// `<|start|>assistant`): `[ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE]`,
// then `<|message|>`, the body, and `<|end|>` (another message follows, `<|start|>assistant…`)
// or `<|return|>` / `<|call|>` (the end).
class HarmonyParser final : public ReasoningParser {
 public:
  explicit HarmonyParser(const Tokenizer& tok)
      : tok_(tok),
        start_(single_token(tok, "gpt_oss", "<|start|>")),
        end_(single_token(tok, "gpt_oss", "<|end|>")),
        message_(single_token(tok, "gpt_oss", "<|message|>")),
        channel_(single_token(tok, "gpt_oss", "<|channel|>")),
        constrain_(single_token(tok, "gpt_oss", "<|constrain|>")),
        return_(single_token(tok, "gpt_oss", "<|return|>")),
        call_(single_token(tok, "gpt_oss", "<|call|>")) {}

  Part route(TokenId t) override {
    if (t == start_) {
      state_ = State::header;
      header_.clear();
    } else if (t == channel_ || t == constrain_) {
      if (state_ != State::header) header_.clear();  // `<|end|><|channel|>…`: a header without its start
      state_ = State::header;
      header_ += t == channel_ ? "<|channel|>" : " <|constrain|>";
    } else if (t == message_) {
      state_ = State::body;
      read_header();
    } else if (t == end_ || t == return_ || t == call_) {
      state_ = State::between;
    } else if (state_ == State::header) {
      // Header words are ASCII; a header never ends only if the model breaks the format.
      if (header_.size() < 4096) tok_.decode_token(t, false, at_start_, header_);
    } else {
      // A body's text; text between messages (the model breaking the format) stays the answer's.
      return state_ == State::body ? body_ : Part::content;
    }
    return Part::markup;
  }
  std::string recipient() const override { return recipient_; }

 private:
  enum class State { header, body, between };

  // channel and recipient of the message whose body starts now.
  void read_header() {
    std::string channel;
    const size_t c = header_.rfind("<|channel|>");
    if (c != std::string::npos) {
      const size_t from = c + 11;
      channel = header_.substr(from, header_.find_first_of(" <", from) - from);
    }
    recipient_.clear();
    const size_t to = header_.find("to=");
    if (to != std::string::npos) recipient_ = header_.substr(to + 3, header_.find_first_of(" <", to + 3) - (to + 3));
    // A function's call is the client's to run; the built-in tools' (browser, python) run in
    // the model's own loop: reasoning.
    body_ = recipient_.rfind("functions.", 0) == 0          ? Part::tool_call
            : !recipient_.empty() || channel == "analysis" ? Part::reasoning
                                                            : Part::content;  // final, and commentary's preambles
    header_.clear();
  }

  const Tokenizer& tok_;
  TokenId start_, end_, message_, channel_, constrain_, return_, call_;
  State state_ = State::header;
  std::string header_, recipient_;
  bool at_start_ = false;
  Part body_ = Part::content;
};

// `<think>…</think>` (DeepSeek-R1, QwQ, Qwen3).
class ThinkParser final : public ReasoningParser {
 public:
  ThinkParser(const Tokenizer& tok, const std::string& name, bool thinking)
      : open_(single_token(tok, name, "<think>")), close_(single_token(tok, name, "</think>")), thinking_(thinking) {}

  Part route(TokenId t) override {
    if (t == open_) thinking_ = true;
    else if (t == close_) thinking_ = false;
    else return thinking_ ? Part::reasoning : Part::content;
    return Part::markup;
  }

 private:
  TokenId open_, close_;
  bool thinking_;
};

}  // namespace

const std::vector<std::string>& reasoning_parser_names() {
  static const std::vector<std::string> names = {"deepseek_r1", "gpt_oss", "qwen3"};
  return names;
}

std::unique_ptr<ReasoningParser> make_reasoning_parser(const std::string& name, const Tokenizer& tok, bool thinking) {
  if (name == "gpt_oss") return std::make_unique<HarmonyParser>(tok);
  if (name == "deepseek_r1") return std::make_unique<ThinkParser>(tok, name, true);
  if (name == "qwen3") return std::make_unique<ThinkParser>(tok, name, thinking);
  std::string known;
  for (const std::string& n : reasoning_parser_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(str("--reasoning-parser ", name, ": unknown (linnet has ", known, ", and none)"));
}

std::string reasoning_parser_for_template(const std::string& source) {
  return source.find("<|channel|>") != std::string::npos && source.find("<|message|>") != std::string::npos ? "gpt_oss"
                                                                                                              : "";
}

}  // namespace linnet::engine
