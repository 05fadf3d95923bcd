// Pieces shared by the tokenizer implementations (not part of the public interface).
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace linnet::tok {

// ---- small helpers -----------------------------------------------------------------------

std::string read_file(const std::string& path);
// False when nothing is there; throws naming the file when it is not a regular file.
bool file_exists(const std::string& path, const std::string& what);
std::string base64_decode(std::string_view in, const std::string& what);

// Length of the UTF-8 character starting at s[i]; an invalid byte counts as one character.
std::size_t utf8_char_len(std::string_view s, std::size_t i);
// The UTF-8 encoding of a code point.
std::string utf8_encode(std::uint32_t cp);

// Unicode normalization (utf8proc) of a byte string: each maximal valid UTF-8 run is
// normalized, invalid bytes pass through unchanged (tokenizers only ever sees valid text).
enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
std::string unicode_normalize(std::string_view s, UnicodeForm form);

// unordered_map<std::string, V> that can be looked up with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---- BPE merging -----------------------------------------------------------------------

struct BpeSymbol {
  TokenId id;
  std::int32_t prev, next;  // -1 at the ends
  std::uint32_t start, len;  // bytes of the pre-token it covers; len 0 once merged away
};

struct BpeMerge {
  std::int64_t rank;  // lower merges first; ties go to the leftmost pair
  TokenId id;         // the merged token
};

// Merges adjacent symbols by rank until no pair merges (a binary heap of candidate pairs
// with lazy invalidation: O(n log n) in the number of symbols). pair(left, right) returns
// whether the pair merges and fills `m`. Appends the surviving ids to `out`.
template <class PairFn>
void bpe_merge(std::vector<BpeSymbol>& syms, PairFn&& pair, std::vector<TokenId>& out) {
  struct Cand {
    std::int64_t rank;
    std::uint32_t pos;
    TokenId id;
    bool operator<(const Cand& o) const {  // priority_queue is a max-heap: invert
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const std::size_t n = syms.size();
  if (n > 1) {
    std::vector<Cand> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<Cand> heap(std::less<Cand>(), std::move(heap_storage));
    BpeMerge m;
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (pair(syms[i], syms[i + 1], m)) heap.push({m.rank, std::uint32_t(i), m.id});
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      BpeSymbol& left = syms[c.pos];
      if (left.len == 0 || left.next < 0) continue;
      BpeSymbol& right = syms[left.next];
      // Still the same pair? (Either side may have merged since the candidate was pushed.)
      if (!pair(left, right, m) || m.rank != c.rank || m.id != c.id) continue;
      left.id = c.id;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) syms[right.next].prev = std::int32_t(c.pos);
      if (left.prev >= 0 && pair(syms[left.prev], left, m))
        heap.push({m.rank, std::uint32_t(left.prev), m.id});
      if (left.next >= 0 && pair(left, syms[left.next], m)) heap.push({m.rank, c.pos, m.id});
    }
  }
  for (std::int32_t i = 0; i >= 0 && std::size_t(i) < n; i = syms[i].next) out.push_back(syms[i].id);
}

// ---- PCRE2 ---------------------------------------------------------------------------

// A compiled PCRE2 pattern (UTF + UCP, JIT when available; invalid UTF-8 in subjects is
// allowed and never matches).
class Regex {
 public:
  explicit Regex(const std::string& pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Calls fn(begin, end) for every non-overlapping match, left to right.
  void for_each_match(std::string_view subject,
                      const std::function<void(std::size_t, std::size_t)>& fn) const;
  // Splits `subject` into matches and the gaps between them (both kept, in order).
  void split_isolated(std::string_view subject, std::vector<std::string_view>& out) const;

 private:
  void* code_ = nullptr;
};

// ---- Special (added) tokens matched before anything else --------------------------------

class SpecialMatcher {
 public:
  void add(const std::string& text, TokenId id);
  bool empty() const { return by_len_.empty(); }
  // Calls text_fn(segment, at_text_start) for ordinary text and special_fn(id) for each
  // special token, leftmost-longest.
  template <class TextFn, class SpecialFn>
  void split(std::string_view text, TextFn&& text_fn, SpecialFn&& special_fn) const {
    std::size_t seg = 0, i = 0;
    while (i < text.size()) {
      if (first_[static_cast<unsigned char>(text[i])]) {
        TokenId id = -1;
        std::size_t len = match_at(text, i, id);
        if (len) {
          if (i > seg) text_fn(text.substr(seg, i - seg), seg == 0);
          special_fn(id);
          i += len;
          seg = i;
          continue;
        }
      }
      ++i;
    }
    if (seg < text.size()) text_fn(text.substr(seg), seg == 0);
  }

 private:
  std::size_t match_at(std::string_view text, std::size_t i, TokenId& id) const;
  bool first_[256] = {};
  std::vector<std::pair<std::string, TokenId>> by_len_;  // longest first
};

// Appends bytes with UTF-8 hold-back handled by Decoder; shared strip rule for
// SentencePiece-style decoders: drop up to `n` leading `content` at the start.
void strip_leading(std::string& piece, std::string_view content, int n);

}  // namespace linnet::tok
