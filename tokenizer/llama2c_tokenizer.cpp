// llama2.c's tokenizer.bin: int32 max_token_length, then per token a float32 score, an
// int32 length and the bytes. Encoding follows llama2.c's run.c exactly: a dummy-prefix
// " " token, one token per UTF-8 character (or its bytes + 3 when the character is not in
// the vocabulary), then merging the adjacent pair whose concatenation is in the
// vocabulary with the best score, leftmost first, until none is.
//
// llama2.c looks strings up by binary search (glibc bsearch over a qsort-ed array); the
// vocabulary holds some strings twice (byte tokens 3..258 stored as their character and
// the SentencePiece piece of the same character), and which id it finds is what that search
// finds. We reproduce it: a stable sort by C string and glibc's bisection.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "tokenizer/internal.h"

namespace linnet {
namespace {

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(const std::string& path, std::size_t vocab_size) : path_(path) {
    const std::string data = tok::read_file(path);
    std::size_t pos = 0;
    auto take = [&](void* dst, std::size_t n) {
      if (pos + n > data.size()) throw Error(str(path, ": truncated at byte ", pos));
      std::memcpy(dst, data.data() + pos, n);
      pos += n;
    };
    std::int32_t max_len = 0;
    take(&max_len, 4);
    if (max_len <= 0 || max_len > 4096) throw Error(str(path, ": not a llama2.c tokenizer.bin"));
    while (vocab_size ? pieces_.size() < vocab_size : pos < data.size()) {
      float score;
      std::int32_t len;
      take(&score, 4);
      take(&len, 4);
      if (len < 0 || len > max_len) throw Error(str(path, ": token ", pieces_.size(), " has length ", len));
      std::string s(std::size_t(len), '\0');
      take(s.data(), std::size_t(len));
      pieces_.push_back(std::move(s));
      scores_.push_back(score);
    }
    if (pieces_.size() < 259) throw Error(str(path, ": only ", pieces_.size(), " tokens"));
    // C-string view of each piece (llama2.c compares with strcmp).
    cstr_.resize(pieces_.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i)
      cstr_[i] = std::string_view(pieces_[i].c_str());
    sorted_.resize(pieces_.size());
    for (std::size_t i = 0; i < sorted_.size(); ++i) sorted_[i] = TokenId(i);
    std::stable_sort(sorted_.begin(), sorted_.end(),
                     [&](TokenId a, TokenId b) { return cstr_[a] < cstr_[b]; });
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const std::string key(cstr_[i]);
      if (!lookup_.count(key)) lookup_.emplace(key, bsearch(key));
    }
    // Merge priority: best score first.
    std::vector<TokenId> by_score(sorted_);
    std::stable_sort(by_score.begin(), by_score.end(), [&](TokenId a, TokenId b) { return scores_[a] > scores_[b]; });
    score_rank_.resize(pieces_.size());
    for (std::size_t i = 0; i < by_score.size(); ++i)
      score_rank_[by_score[i]] = i > 0 && scores_[by_score[i]] == scores_[by_score[i - 1]]
                                     ? score_rank_[by_score[i - 1]]
                                     : std::int64_t(i);
    space_id_ = find(" ");
  }

  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    std::vector<TokenId> out;
    if (add_bos) out.push_back(1);
    if (text.empty()) return out;
    std::vector<TokenId> ids;
    if (space_id_ >= 0) ids.push_back(space_id_);  // the dummy prefix
    // One token per UTF-8 character as llama2.c delimits them: a new character starts at
    // every byte that is not a continuation byte, and ends after at most 4 bytes.
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t n = 1;
      while (i + n < text.size() && n < 4 && (static_cast<unsigned char>(text[i + n]) & 0xc0) == 0x80) ++n;
      std::string_view ch = text.substr(i, n);
      TokenId id = ch.find('\0') == std::string_view::npos ? find(ch) : -1;
      if (id >= 0) {
        ids.push_back(id);
      } else {
        for (char c : ch) ids.push_back(TokenId(static_cast<unsigned char>(c)) + 3);
      }
      i += n;
    }
    std::vector<tok::BpeSymbol> syms(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k)
      syms[k] = {ids[k], std::int32_t(k) - 1, k + 1 < ids.size() ? std::int32_t(k + 1) : -1, std::uint32_t(k), 1};
    std::string buf;
    tok::bpe_merge(
        syms,
        [&](const tok::BpeSymbol& l, const tok::BpeSymbol& r, tok::BpeMerge& m) {
          buf.assign(cstr_[l.id]);
          buf.append(cstr_[r.id]);
          TokenId id = find(buf);
          if (id < 0) return false;
          m = {score_rank_[id], id};
          return true;
        },
        out);
    return out;
  }

  void decode_token(TokenId id, bool, bool& at_start, std::string& out) const override {
    if (id < 0 || std::size_t(id) >= pieces_.size())
      throw Error(str("token id ", id, " is out of range (vocabulary of ", pieces_.size(), ")"));
    if (id == 1 || id == 2) return;  // BOS, EOS: control tokens, no text (as sentencepiece)
    if (id == 0) {
      out += " \xE2\x81\x87 ";  // <unk>, as sentencepiece renders it
      at_start = false;
      return;
    }
    // Byte tokens stand for their byte (as in sentencepiece; tokenizer.bin stores 0x80..0xFF
    // as Latin-1 characters, which is not what the model means by them).
    const std::string byte = id >= 3 && id < 259 ? std::string(1, char(id - 3)) : std::string();
    const std::string& p = id >= 3 && id < 259 ? byte : pieces_[std::size_t(id)];
    // The dummy prefix: the first text's leading space goes (llama2.c strips it after BOS;
    // its encoder may have produced it as the byte token 35).
    if (at_start && !p.empty() && p[0] == ' ') out.append(p, 1);
    else out += p;
    if (!p.empty()) at_start = false;
  }

  std::size_t vocab_size() const override { return pieces_.size(); }
  TokenId bos_id() const override { return 1; }
  TokenId eos_id() const override { return 2; }
  std::string description() const override { return "tokenizer.bin (llama2.c)"; }

 private:
  TokenId find(std::string_view s) const {
    auto it = lookup_.find(s);
    return it == lookup_.end() ? -1 : it->second;
  }
  // glibc's bsearch over sorted_.
  TokenId bsearch(std::string_view key) const {
    std::size_t lo = 0, hi = sorted_.size();
    while (lo < hi) {
      std::size_t mid = (lo + hi) / 2;
      int c = key.compare(cstr_[sorted_[mid]]);
      if (c < 0) hi = mid;
      else if (c > 0) lo = mid + 1;
      else return sorted_[mid];
    }
    return -1;
  }

  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::string_view> cstr_;
  std::vector<TokenId> sorted_;
  std::vector<std::int64_t> score_rank_;
  tok::StringMap<TokenId> lookup_;
  TokenId space_id_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& tokenizer_bin_path, std::size_t vocab_size) {
  return std::make_unique<Llama2cTokenizer>(tokenizer_bin_path, vocab_size);
}

}  // namespace linnet
