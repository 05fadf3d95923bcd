#include "engine/completion_text.h"

#include <algorithm>

namespace linnet::engine {

CompletionText::CompletionText(const Tokenizer& tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop,
                               TextOptions options, std::unique_ptr<ReasoningParser> reasoning)
    : decoder_(tok.decoder(options.skip_special)),
      stop_(std::move(stop)),
      options_(options),
      parser_(std::move(reasoning)),
      reasoning_decoder_(tok.decoder(options.skip_special)),
      tool_decoder_(tok.decoder(options.skip_special)) {
  // The prompt read first, so a SentencePiece vocabulary keeps the first token's space; its
  // text is not the completion's.
  for (Decoder* d : {&decoder_, &reasoning_decoder_, &tool_decoder_}) {
    if (d != &decoder_ && !parser_) break;
    for (int32_t t : prompt) d->push(t);
    d->flush();
  }
}

Decoder& CompletionText::decoder_for(Part part) {
  return part == Part::reasoning ? reasoning_decoder_ : part == Part::tool_call ? tool_decoder_ : decoder_;
}

bool CompletionText::push(int32_t token) {
  if (stopped_) return true;
  if (parser_) {
    const Part part = parser_->route(token);
    if (part != last_) {  // a new message (markup always stands between two): the last one's bytes out
      const std::string rest = last_ == Part::markup ? "" : decoder_for(last_).flush();
      if (last_ == Part::content) text_ += rest;
      if (last_ == Part::reasoning) reasoning_ += rest;
      if (last_ == Part::tool_call) tool_calls_.back().second += rest;
      if (part == Part::tool_call) tool_calls_.emplace_back(parser_->recipient(), "");
      last_ = part;
    }
    if (part != Part::content) {
      ++pushed_;
      if (part == Part::reasoning) reasoning_ += reasoning_decoder_.push(token);
      if (part == Part::tool_call) tool_calls_.back().second += tool_decoder_.push(token);
      return false;
    }
  }
  const size_t before = text_.size();
  text_ += decoder_.push(token);
  if (++pushed_ < options_.min_tokens) return false;  // vLLM: no stop check before min_tokens
  // Only where the new text could complete a stop string; the one that starts first wins.
  size_t first = std::string::npos;
  for (const auto& s : stop_) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && (first == std::string::npos || at < first || (at == first && s.size() > stop_string_.size()))) {
      first = at;
      stop_string_ = s;
    }
  }
  if (first != std::string::npos) {
    text_.resize(options_.include_stop_str ? first + stop_string_.size() : first);
    stopped_ = true;
  }
  return stopped_;
}

void CompletionText::finish(const Completion& c) {
  if (stopped_) return;
  // With a parser the ending token is the format's (harmony's <|return|>): never the answer's text.
  if (c.reason == FinishReason::stop && options_.include_stop_str && !c.tokens.empty() && !parser_)
    text_ += decoder_.push(c.tokens.back());
  text_ += decoder_.flush();
  if (!parser_) return;
  reasoning_ += reasoning_decoder_.flush();
  if (!tool_calls_.empty()) tool_calls_.back().second += tool_decoder_.flush();
}

size_t CompletionText::releasable() const {
  if (stopped_) return text_.size();
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > keep; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return text_.size() - keep;
}

}  // namespace linnet::engine
