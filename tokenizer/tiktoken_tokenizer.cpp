// tiktoken rank files (Llama 3's original tokenizer.model): one "<base64 bytes> <rank>"
// per line; encoding splits with Llama 3's pattern and merges byte pairs by the rank of
// their concatenation. Llama 3's 256 special tokens follow the base vocabulary.
#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "tokenizer/internal.h"

namespace linnet {
namespace {

// Meta's llama3 tokenizer.py.
const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> s = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                                "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                                "<|reserved_special_token_4|>", "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i) s.push_back(str("<|reserved_special_token_", i, "|>"));
  return s;
}

class TiktokenTokenizer final : public Tokenizer {
 public:
  explicit TiktokenTokenizer(const std::string& path) : path_(path), split_(kLlama3Pattern) {
    const std::string data = tok::read_file(path);
    // Ranks run 0..n-1 over the file's n lines; a larger one is refused before it sizes
    // the table (a corrupt rank must not ask for terabytes).
    const std::size_t max_lines = std::size_t(std::count(data.begin(), data.end(), '\n')) + 1;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < data.size();) {
      std::size_t eol = data.find('\n', pos);
      if (eol == std::string::npos) eol = data.size();
      std::string_view line(data.data() + pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      std::size_t sp = line.find(' ');
      long rank = -1;
      if (sp != std::string_view::npos)
        std::from_chars(line.data() + sp + 1, line.data() + line.size(), rank);
      if (sp == std::string_view::npos || rank < 0)
        throw Error(str(path, ":", line_no, ": expected '<base64 token> <rank>'"));
      if (std::size_t(rank) >= max_lines)
        throw Error(str(path, ":", line_no, ": rank ", rank, " is past the file's ", max_lines,
                        " lines (ranks are 0..n-1)"));
      std::string bytes = tok::base64_decode(line.substr(0, sp), str(path, ":", line_no));
      if (std::size_t(rank) >= bytes_.size()) bytes_.resize(std::size_t(rank) + 1);
      bytes_[std::size_t(rank)] = bytes;
      if (!ranks_.emplace(std::move(bytes), TokenId(rank)).second)
        throw Error(str(path, ":", line_no, ": duplicate token"));
    }
    if (ranks_.size() != bytes_.size())
      throw Error(str(path, ": ranks are not 0..", ranks_.size() - 1));
    for (int b = 0; b < 256; ++b) {
      auto it = ranks_.find(std::string_view(std::string(1, char(b))));
      if (it == ranks_.end()) throw Error(str(path, ": byte ", b, " has no rank"));
      byte_rank_[b] = it->second;
    }
    n_base_ = bytes_.size();
    auto specials = llama3_special_tokens();
    for (std::size_t i = 0; i < specials.size(); ++i) {
      bytes_.push_back(specials[i]);
      specials_.add(specials[i], TokenId(n_base_ + i));
    }
  }

  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos) out.push_back(bos_id());
    std::vector<tok::BpeSymbol> syms;
    std::vector<std::string_view> pieces;
    specials_.split(
        text,
        [&](std::string_view seg, bool) {
          // The pattern covers all valid UTF-8; invalid bytes are left between matches and
          // become pieces of their own (tiktoken takes only valid text).
          pieces.clear();
          split_.split_isolated(seg, pieces);
          for (auto p : pieces) encode_piece(p, syms, out);
        },
        [&](TokenId id) { out.push_back(id); });
    return out;
  }

  void decode_token(TokenId id, bool skip_special, bool& at_start, std::string& out) const override {
    if (id < 0 || std::size_t(id) >= bytes_.size())
      throw Error(str("token id ", id, " is out of range (vocabulary of ", bytes_.size(), ")"));
    if (skip_special && std::size_t(id) >= n_base_) return;
    out += bytes_[std::size_t(id)];
    at_start = false;
  }

  std::size_t vocab_size() const override { return bytes_.size(); }
  TokenId bos_id() const override { return TokenId(n_base_); }
  TokenId eos_id() const override { return TokenId(n_base_ + 1); }
  std::string description() const override { return "tokenizer.model (tiktoken ranks, Llama 3 pattern)"; }

 private:
  void encode_piece(std::string_view piece, std::vector<tok::BpeSymbol>& syms, std::vector<TokenId>& out) const {
    if (auto it = ranks_.find(piece); it != ranks_.end()) {
      out.push_back(it->second);
      return;
    }
    syms.clear();
    for (std::size_t i = 0; i < piece.size(); ++i)
      syms.push_back({byte_rank_[static_cast<unsigned char>(piece[i])], std::int32_t(i) - 1,
                      i + 1 < piece.size() ? std::int32_t(i + 1) : -1, std::uint32_t(i), 1});
    tok::bpe_merge(
        syms,
        [&](const tok::BpeSymbol& l, const tok::BpeSymbol& r, tok::BpeMerge& m) {
          auto it = ranks_.find(piece.substr(l.start, l.len + r.len));
          if (it == ranks_.end()) return false;
          m = {it->second, it->second};
          return true;
        },
        out);
  }

  std::string path_;
  tok::Regex split_;
  tok::StringMap<TokenId> ranks_;
  std::vector<std::string> bytes_;
  TokenId byte_rank_[256];
  std::size_t n_base_ = 0;
  tok::SpecialMatcher specials_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& rank_file_path) {
  return std::make_unique<TiktokenTokenizer>(rank_file_path);
}

}  // namespace linnet
