#include "engine/completion_text.h"

#include <algorithm>

namespace linnet::engine {

CompletionText::CompletionText(const Tokenizer& tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop)
    : decoder_(tok.decoder(true)), stop_(std::move(stop)) {
  for (int32_t t : prompt) decoder_.push(t);
  decoder_.flush();  // the prompt's text is not the completion's
}

bool CompletionText::push(int32_t token) {
  if (stopped_) return true;
  const size_t before = text_.size();
  text_ += decoder_.push(token);
  // Only where the new text could complete a stop string.
  for (const auto& s : stop_) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) {
      text_.resize(at);
      stopped_ = true;
    }
  }
  return stopped_;
}

void CompletionText::finish() {
  if (!stopped_) text_ += decoder_.flush();
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
