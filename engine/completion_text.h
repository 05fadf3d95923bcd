// The text of one completion as it is generated, for `linnet generate` and `linnet serve`
// alike: decoded token by token (the prompt read first, so the first token keeps the space a
// SentencePiece vocabulary drops at the start of a text; special tokens give no text), cut
// where a stop string first appears, and — for a stream — how much of it may be sent while a
// stop string could still complete (the hold-back).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace linnet::engine {

class CompletionText {
 public:
  CompletionText(const Tokenizer& tok, const std::vector<int32_t>& prompt, std::vector<std::string> stop);

  // One generated token; true once a stop string has appeared (the text is cut before it).
  bool push(int32_t token);
  // The end of the completion: what the decoder still holds (unless it stopped).
  void finish();

  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }
  // Bytes of text() that no stop string can still take back: all but the longest end of it
  // that is the start of a stop string.
  size_t releasable() const;

 private:
  Decoder decoder_;
  std::string text_;
  std::vector<std::string> stop_;
  bool stopped_ = false;
};

}  // namespace linnet::engine
