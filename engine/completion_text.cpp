#include "engine/completion_text.h"

#include <algorithm>

namespace linnet::engine {

CompletionText::CompletionText(const Tokenizer& tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop,
                               TextOptions options)
    : decoder_(tok.decoder(options.skip_special)), stop_(std::move(stop)), options_(options) {
  for (int32_t t : prompt) decoder_.push(t);
  decoder_.flush();  // the prompt's text is not the completion's
}

bool CompletionText::push(int32_t token) {
  if (stopped_) return true;
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
  if (c.reason == FinishReason::stop && options_.include_stop_str && !c.tokens.empty()) text_ += decoder_.push(c.tokens.back());
  text_ += decoder_.flush();
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
