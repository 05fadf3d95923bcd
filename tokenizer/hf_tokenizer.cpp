// Hugging Face tokenizer.json with a BPE model: the normalizers, pre-tokenizers and
// decoders that byte-level (GPT-2, Llama 3) and SentencePiece-style (Llama 2, TinyLlama)
// files use. Anything else is refused with an Error naming it.
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include <utf8proc.h>

#include "core/error.h"
#include "core/files.h"
#include "tokenizer/internal.h"

namespace linnet {
namespace {

using nlohmann::json;

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kMetaspace = "\xE2\x96\x81";  // ▁

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256+n.
struct ByteLevelTable {
  std::string to_char[256];
  std::unordered_map<std::uint32_t, std::uint8_t> from_cp;
  ByteLevelTable() {
    std::uint32_t n = 0;
    for (std::uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      std::uint32_t cp = printable ? b : 256 + n++;
      to_char[b] = tok::utf8_encode(cp);
      from_cp[cp] = std::uint8_t(b);
    }
  }
};
const ByteLevelTable& byte_level() {
  static const ByteLevelTable t;
  return t;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  std::size_t pos = 0;
  for (std::size_t at; (at = s.find(from, pos)) != std::string::npos; pos = at + from.size()) {
    out.append(s, pos, at - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

std::string pattern_of(const json& p, const std::string& where) {
  if (p.contains("String")) return p["String"].get<std::string>();
  if (p.contains("Regex")) return p["Regex"].get<std::string>();
  throw Error(str(where, ": pattern is neither String nor Regex"));
}

// ---- normalizers ---------------------------------------------------------------------

struct Normalizer {
  enum Kind { kPrepend, kReplaceString, kReplaceRegex, kUnicode } kind;
  std::string a, b;                 // prepend text / (pattern, content)
  std::shared_ptr<tok::Regex> re;
  tok::UnicodeForm form = tok::UnicodeForm::nfc;  // kUnicode
};

// ---- pre-tokenizers ------------------------------------------------------------------

struct PreTokenizer {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind;
  std::shared_ptr<tok::Regex> re;    // Split; ByteLevel with use_regex
  enum Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext } behavior = kIsolated;
  bool add_prefix_space = false;     // ByteLevel
  std::string replacement;           // Metaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;                 // Metaspace
  bool individual_digits = false;    // Digits
};

// ---- added tokens ---------------------------------------------------------------------
//
// As `tokenizers` (0.23) splits text on its added tokens (AddedVocabulary::find_matches):
// the patterns are matched leftmost-longest, each match searched after the end of the
// previous one (a match refused by single_word is skipped whole, its text not searched
// again); then
//   single_word: refused if the character before the match or after it (within the text
//                being split) is a word character (Rust regex's Unicode \w);
//   lstrip:      the match takes the whitespace (Unicode White_Space) before it, but none
//                of what an earlier match took;
//   rstrip:      the match takes the whitespace after it (the next match is still searched
//                from the end of the token itself).

// The code point at s[i] (one invalid byte: none, length 1).
std::pair<std::int32_t, std::size_t> code_point_at(std::string_view s, std::size_t i) {
  const std::size_t n = tok::utf8_char_len(s, i);
  if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return {-1, 1};
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(n), &cp);
  return {cp, n};
}

// The code point that ends s[0, i) and its length (an invalid byte: none, length 1).
std::pair<std::int32_t, std::size_t> code_point_before(std::string_view s, std::size_t i) {
  for (std::size_t k = 2; k <= 4 && k <= i; ++k)
    if (tok::utf8_char_len(s, i - k) == k) return code_point_at(s, i - k);
  return code_point_at(s, i - 1);
}

// Unicode White_Space (Rust regex's \s).
bool is_white_space(std::int32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation,
// Join_Control. Alphabetic is the letters, Nl, and Other_Alphabetic, which is marks but for
// the circled / squared Latin letters (So) listed here.
bool is_word_char(std::int32_t c) {
  if (c < 0) return false;
  if (c == 0x200c || c == 0x200d) return true;
  if ((c >= 0x24b6 && c <= 0x24e9) || (c >= 0x1f130 && c <= 0x1f149) || (c >= 0x1f150 && c <= 0x1f169) ||
      (c >= 0x1f170 && c <= 0x1f189))
    return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

struct AddedToken {
  std::string pattern;  // the content, or its normalized form (normalized: true)
  TokenId id;
  bool single_word, lstrip, rstrip;
};

class AddedTokenMatcher {
 public:
  void add(AddedToken t) {
    first_[static_cast<unsigned char>(t.pattern[0])] = true;
    by_len_.push_back(std::move(t));
    std::stable_sort(by_len_.begin(), by_len_.end(),
                     [](const auto& a, const auto& b) { return a.pattern.size() > b.pattern.size(); });
  }
  bool empty() const { return by_len_.empty(); }

  // Calls piece(begin, end) for the text between tokens and token(id) for each token, in order.
  template <class PieceFn, class TokenFn>
  void split(std::string_view s, PieceFn&& piece, TokenFn&& token) const {
    std::size_t start_offset = 0, pos = 0;
    while (pos < s.size()) {
      const AddedToken* m = nullptr;
      std::size_t start = pos;
      for (; start < s.size() && !m; ++start) {
        if (!first_[static_cast<unsigned char>(s[start])]) continue;
        for (const auto& t : by_len_)
          if (s.compare(start, t.pattern.size(), t.pattern) == 0) {
            m = &t;
            break;
          }
        if (m) break;
      }
      if (!m) break;
      std::size_t stop = start + m->pattern.size();
      pos = stop;
      if (m->single_word) {
        const bool word_before = start > 0 && is_word_char(code_point_before(s, start).first);
        const bool word_after = stop < s.size() && is_word_char(code_point_at(s, stop).first);
        if (word_before || word_after) continue;
      }
      if (m->lstrip) {
        std::size_t b = start;
        while (b > 0) {
          auto [cp, n] = code_point_before(s, b);
          if (!is_white_space(cp)) break;
          b -= n;
        }
        start = std::max(b, start_offset);
      }
      if (m->rstrip) {
        while (stop < s.size()) {
          auto [cp, n] = code_point_at(s, stop);
          if (!is_white_space(cp)) break;
          stop += n;
        }
      }
      if (start > stop)  // tokenizers panics here ("AddedVocabulary bad split")
        throw Error("an added token with rstrip overlaps the next added token in a way tokenizers cannot split");
      if (start_offset < start) piece(start_offset, start);
      token(m->id);
      start_offset = stop;
    }
    if (start_offset != s.size()) piece(start_offset, s.size());
  }

 private:
  bool first_[256] = {};
  std::vector<AddedToken> by_len_;  // longest first
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path) : path_(path) {
    const json j = read_json_file(path, "tokenizer");
    try {
      load(j);
    } catch (const json::exception& e) {
      throw Error(str(path, ": unexpected structure (", e.what(), ")"));
    }
  }

  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos) {
      if (bos_ < 0) throw Error(str(path_, ": the tokenizer has no BOS token"));
      out.push_back(bos_);
    }
    // As tokenizers: added tokens with normalized: false are split off the raw text; each
    // piece between them is normalized, and those with normalized: true are split off the
    // normalized piece; what is left is pre-tokenized and encoded.
    std::string norm;
    std::vector<std::string> pieces, next;
    auto push = [&](TokenId id) { out.push_back(id); };
    raw_added_.split(
        text,
        [&](std::size_t b, std::size_t e) {
          norm.assign(text.substr(b, e - b));
          normalize(norm);
          const bool first = b == 0;  // Metaspace prepend_scheme "first"
          if (norm_added_.empty()) {
            encode_normalized(norm, first, pieces, next, out);
            return;
          }
          // Offset 0 of the text is offset 0 of the normalized piece (load() refuses the
          // files where a later offset could map there too).
          norm_added_.split(
              norm,
              [&](std::size_t nb, std::size_t ne) {
                encode_normalized(std::string_view(norm).substr(nb, ne - nb), first && nb == 0, pieces, next, out);
              },
              push);
        },
        push);
    return out;
  }

  void decode_token(TokenId id, bool skip_special, bool& at_start, std::string& out) const override {
    if (id < 0 || std::size_t(id) >= decoded_.size() || !has_token_[std::size_t(id)])
      throw Error(str("token id ", id, " is not in the vocabulary (", vocab_size(), " tokens)"));
    if (skip_[std::size_t(id)] && skip_special) return;
    const std::string& t = decoded_[std::size_t(id)];
    if (at_start && strip_start_ > 0 && !t.empty()) {
      std::string s = t;
      tok::strip_leading(s, strip_content_, strip_start_);
      out += s;
    } else {
      out += t;
    }
    if (!t.empty()) at_start = false;
  }

  std::size_t vocab_size() const override { return decoded_.size(); }
  TokenId bos_id() const override { return bos_; }
  bool adds_bos() const override { return template_bos_; }
  TokenId eos_id() const override { return eos_; }
  std::string description() const override {
    return str("tokenizer.json (BPE, ", byte_level_ ? "byte-level" : "SentencePiece-style",
               byte_fallback_ ? ", byte fallback" : "", ")");
  }

 private:
  void load(const json& j) {
    const json& model = j.at("model");
    std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (type != "BPE")
      throw Error(str(path_, ": model type '", type.empty() ? "(none)" : type,
                      "' is not supported (linnet reads BPE tokenizer.json files only)"));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
        throw Error(str(path_, ": BPE option '", key, "' is not supported"));
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0)
      throw Error(str(path_, ": BPE dropout is not supported"));
    byte_fallback_ = model.value("byte_fallback", false);
    fuse_unk_ = model.value("fuse_unk", false);
    ignore_merges_ = model.value("ignore_merges", false);

    // Ids index the tables below: a negative or huge one (a hostile or broken file) is refused
    // by name before anything is sized from it.
    auto checked_id = [&](const json& id, const std::string& where) {
      constexpr std::int64_t kMaxId = std::int64_t{1} << 24;  // past any vocabulary (Gemma 3's is 262144)
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxId)
        throw Error(str(path_, ": ", where, " has id ", id.dump(), ": ids must be integers in [0, ", kMaxId, ")"));
      return static_cast<std::size_t>(id.get<std::int64_t>());
    };
    std::size_t n = 0;
    for (const auto& [tokstr, id] : model.at("vocab").items())
      n = std::max(n, checked_id(id, str("model.vocab[", json(tokstr).dump(), "]")) + 1);
    std::size_t k = 0;
    for (const auto& t : j.value("added_tokens", json::array()))
      n = std::max(n, checked_id(t.at("id"), str("added_tokens[", k++, "]")) + 1);
    tokens_.resize(n);
    has_token_.assign(n, false);
    special_.assign(n, false);
    for (const auto& [tokstr, id] : model.at("vocab").items()) {
      TokenId i = id.get<TokenId>();
      vocab_[tokstr] = i;
      tokens_[std::size_t(i)] = tokstr;
      has_token_[std::size_t(i)] = true;
    }
    if (model.contains("unk_token") && !model["unk_token"].is_null()) {
      auto it = vocab_.find(model["unk_token"].get<std::string>());
      if (it != vocab_.end()) unk_ = it->second;
    }
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto it = vocab_.find(std::string_view(name));
        byte_id_[b] = it == vocab_.end() ? -1 : it->second;
      }
    }
    std::int64_t rank = 0;
    for (const auto& m : model.at("merges")) {
      std::string a, b;
      if (m.is_string()) {
        std::string s = m.get<std::string>();
        std::size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw Error(str(path_, ": merge '", s, "' is not two tokens"));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = m.at(0).get<std::string>();
        b = m.at(1).get<std::string>();
      }
      auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
      if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end())
        throw Error(str(path_, ": merge '", a, " ", b, "' uses tokens not in the vocabulary"));
      merges_.emplace(key(ia->second, ib->second), tok::BpeMerge{rank++, ic->second});
    }

    if (j.contains("normalizer") && !j["normalizer"].is_null()) load_normalizer(j["normalizer"]);
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) load_pre_tokenizer(j["pre_tokenizer"]);
    load_added_tokens(j.value("added_tokens", json::array()));
    std::vector<std::function<void(std::string&)>> per_token;
    bool fused = false;
    if (j.contains("decoder") && !j["decoder"].is_null()) load_decoder(j["decoder"], per_token, fused);
    decoded_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!has_token_[i]) continue;
      std::string s = tokens_[i];
      for (auto& f : per_token) f(s);
      decoded_[i] = std::move(s);
    }
    if (j.contains("post_processor") && !j["post_processor"].is_null()) find_bos(j["post_processor"]);
    auto named = [&](std::initializer_list<const char*> names) -> TokenId {
      for (const char* s : names) {
        auto it = vocab_.find(std::string_view(s));
        if (it != vocab_.end()) return it->second;
        for (std::size_t i = 0; i < n; ++i)
          if (has_token_[i] && special_[i] && tokens_[i] == s) return TokenId(i);
      }
      return -1;
    };
    if (bos_ < 0) bos_ = named({"<|begin_of_text|>", "<s>"});
    eos_ = named({"<|end_of_text|>", "</s>", "<|endoftext|>"});
  }

  static std::uint64_t key(TokenId a, TokenId b) { return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b); }

  // The added tokens as tokenizers 0.23 reads them (TokenizerImpl deserialization, then
  // AddedVocabulary::add_tokens): in file order; empty contents ignored; a content already in
  // the vocabulary keeps its id, a new one takes the next id after the vocabulary; a content
  // given twice takes the flags of the last entry. A token with normalized: true is matched
  // by its normalized form and decodes from it; decode(skip_special) leaves out every id whose
  // text (that form, for those) is the content of a special token.
  void load_added_tokens(const json& list) {
    struct Entry {
      std::string content;
      TokenId id;
      bool special, normalized, single_word, lstrip, rstrip;
    };
    std::vector<Entry> entries;
    tok::StringMap<std::size_t> by_content;
    TokenId next_id = TokenId(vocab_.size());
    for (const auto& t : list) {
      Entry e;
      e.content = t.at("content").get<std::string>();
      if (e.content.empty()) continue;
      e.special = t.value("special", false);
      e.normalized = t.value("normalized", !e.special);
      e.single_word = t.value("single_word", false);
      e.lstrip = t.value("lstrip", false);
      e.rstrip = t.value("rstrip", false);
      const TokenId file_id = t.at("id").get<TokenId>();
      if (auto it = by_content.find(e.content); it != by_content.end()) {
        e.id = entries[it->second].id;
        entries[it->second] = e;
      } else {
        auto v = vocab_.find(e.content);
        e.id = v != vocab_.end() ? v->second : next_id++;
        by_content.emplace(e.content, entries.size());
        entries.push_back(e);
      }
      if (file_id != e.id)
        throw Error(str(path_, ": added token '", e.content, "' has id ", file_id, " in the file but tokenizers gives it id ",
                        e.id, " (", vocab_.count(e.content) ? "its id in the vocabulary" : "the next id after the vocabulary",
                        "); refused rather than encoded with either"));
    }
    std::size_t n = tokens_.size();
    for (const auto& e : entries) n = std::max(n, std::size_t(e.id) + 1);
    tokens_.resize(n);
    has_token_.resize(n, false);
    special_.resize(n, false);
    std::unordered_set<std::string> special_contents;
    tok::StringMap<TokenId> patterns_raw, patterns_norm;
    for (const auto& e : entries) {
      std::string pattern = e.content;
      if (e.normalized) normalize(pattern);
      if (pattern.empty())
        throw Error(str(path_, ": added token '", e.content, "' (normalized: true) normalizes to nothing"));
      auto& seen = e.normalized ? patterns_norm : patterns_raw;
      if (auto it = seen.find(pattern); it != seen.end())
        throw Error(str(path_, ": added tokens '", e.content, "' and id ", it->second, " are matched by the same text '",
                        pattern, "' (tokenizers cannot load this file either)"));
      seen.emplace(pattern, e.id);
      tokens_[std::size_t(e.id)] = pattern;
      has_token_[std::size_t(e.id)] = true;
      special_[std::size_t(e.id)] = e.special;
      if (e.special) special_contents.insert(e.content);
      (e.normalized ? norm_added_ : raw_added_).add({pattern, e.id, e.single_word, e.lstrip, e.rstrip});
      if (e.normalized && !normalizers_.empty())
        for (const auto& p : pre_)
          if (p.kind == PreTokenizer::kMetaspace && p.prepend == PreTokenizer::kFirst)
            throw Error(str(path_, ": added token '", e.content,
                            "' has normalized: true, with a normalizer and a Metaspace pre-tokenizer with "
                            "prepend_scheme 'first': which pieces after it start the original text is not "
                            "reproduced (refused rather than tokenized differently from tokenizers)"));
    }
    skip_.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) skip_[i] = has_token_[i] && special_contents.count(tokens_[i]) > 0;
  }

  void find_bos(const json& p) {
    std::string type = p.value("type", "");
    if (type == "Sequence") {
      for (const auto& q : p.at("processors")) find_bos(q);
    } else if (type == "TemplateProcessing") {
      const json& single = p.at("single");
      if (!single.empty() && single[0].contains("SpecialToken")) {
        std::string name = single[0]["SpecialToken"].at("id").get<std::string>();
        const json& st = p.at("special_tokens").at(name);
        if (!st.at("ids").empty()) bos_ = st["ids"][0].get<TokenId>();
        template_bos_ = bos_ >= 0;
      }
    }
    // ByteLevel (offsets only) and others add nothing we use.
  }

  void load_normalizer(const json& nj) {
    std::string type = nj.value("type", "");
    if (type == "Sequence") {
      for (const auto& q : nj.at("normalizers")) load_normalizer(q);
    } else if (type == "Prepend") {
      normalizers_.push_back({Normalizer::kPrepend, nj.at("prepend").get<std::string>(), "", nullptr, {}});
    } else if (type == "Replace") {
      const json& p = nj.at("pattern");
      std::string content = nj.at("content").get<std::string>();
      if (p.contains("String")) {
        normalizers_.push_back({Normalizer::kReplaceString, p["String"].get<std::string>(), content, nullptr, {}});
      } else {
        normalizers_.push_back({Normalizer::kReplaceRegex, "", content,
                                std::make_shared<tok::Regex>(pattern_of(p, path_)), {}});
      }
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      const tok::UnicodeForm form = type == "NFC"    ? tok::UnicodeForm::nfc
                                    : type == "NFD"  ? tok::UnicodeForm::nfd
                                    : type == "NFKC" ? tok::UnicodeForm::nfkc
                                                     : tok::UnicodeForm::nfkd;
      normalizers_.push_back({Normalizer::kUnicode, "", "", nullptr, form});
    } else {
      throw Error(str(path_, ": normalizer '", type, "' is not supported"));
    }
  }

  void load_pre_tokenizer(const json& pj) {
    std::string type = pj.value("type", "");
    PreTokenizer p{};
    if (type == "Sequence") {
      for (const auto& q : pj.at("pretokenizers")) load_pre_tokenizer(q);
      return;
    } else if (type == "Split") {
      p.kind = PreTokenizer::kSplit;
      const json& pat = pj.at("pattern");
      p.re = std::make_shared<tok::Regex>(pattern_of(pat, path_), pat.contains("String"));
      std::string beh = pj.value("behavior", "Isolated");
      if (beh == "Isolated") p.behavior = PreTokenizer::kIsolated;
      else if (beh == "Removed") p.behavior = PreTokenizer::kRemoved;
      else if (beh == "MergedWithPrevious") p.behavior = PreTokenizer::kMergedWithPrevious;
      else if (beh == "MergedWithNext") p.behavior = PreTokenizer::kMergedWithNext;
      else throw Error(str(path_, ": Split behavior '", beh, "' is not supported"));
      if (pj.value("invert", false)) throw Error(str(path_, ": Split with invert is not supported"));
    } else if (type == "ByteLevel") {
      p.kind = PreTokenizer::kByteLevel;
      p.add_prefix_space = pj.value("add_prefix_space", false);
      if (pj.value("use_regex", true)) p.re = std::make_shared<tok::Regex>(kGpt2Pattern);
      byte_level_ = true;
    } else if (type == "Metaspace") {
      p.kind = PreTokenizer::kMetaspace;
      p.replacement = pj.value("replacement", std::string(kMetaspace));
      std::string scheme = pj.value("prepend_scheme", pj.value("add_prefix_space", true) ? "always" : "never");
      p.prepend = scheme == "first" ? PreTokenizer::kFirst : scheme == "never" ? PreTokenizer::kNever : PreTokenizer::kAlways;
      p.split = pj.value("split", true);
    } else if (type == "Digits") {
      p.kind = PreTokenizer::kDigits;
      p.individual_digits = pj.value("individual_digits", false);
    } else {
      throw Error(str(path_, ": pre-tokenizer '", type, "' is not supported"));
    }
    pre_.push_back(std::move(p));
  }

  void load_decoder(const json& dj, std::vector<std::function<void(std::string&)>>& per_token, bool& fused) {
    std::string type = dj.value("type", "");
    if (type == "Sequence") {
      for (const auto& q : dj.at("decoders")) load_decoder(q, per_token, fused);
    } else if (type == "ByteLevel") {
      per_token.push_back([](std::string& s) {
        const auto& t = byte_level();
        std::string out;
        for (std::size_t i = 0; i < s.size();) {
          std::size_t n = tok::utf8_char_len(s, i);
          std::uint32_t cp = 0;
          auto c = [&](std::size_t k) { return std::uint32_t(static_cast<unsigned char>(s[i + k])); };
          if (n == 1) cp = c(0);
          else if (n == 2) cp = ((c(0) & 0x1f) << 6) | (c(1) & 0x3f);
          else if (n == 3) cp = ((c(0) & 0x0f) << 12) | ((c(1) & 0x3f) << 6) | (c(2) & 0x3f);
          else cp = ((c(0) & 0x07) << 18) | ((c(1) & 0x3f) << 12) | ((c(2) & 0x3f) << 6) | (c(3) & 0x3f);
          auto it = t.from_cp.find(cp);
          if (it == t.from_cp.end()) return;  // as tokenizers: a token with any other character stays as it is
          out.push_back(char(it->second));
          i += n;
        }
        s = std::move(out);
      });
    } else if (type == "Replace") {
      const json& p = dj.at("pattern");
      if (!p.contains("String")) throw Error(str(path_, ": Replace decoder with a regex is not supported"));
      std::string from = p["String"].get<std::string>(), to = dj.at("content").get<std::string>();
      per_token.push_back([from, to](std::string& s) { replace_all(s, from, to); });
    } else if (type == "ByteFallback") {
      per_token.push_back([](std::string& s) {
        if (s.size() == 6 && s.starts_with("<0x") && s[5] == '>' && std::isxdigit(static_cast<unsigned char>(s[3])) &&
            std::isxdigit(static_cast<unsigned char>(s[4])))
          s = std::string(1, char(std::stoi(s.substr(3, 2), nullptr, 16)));
      });
    } else if (type == "Fuse") {
      fused = true;
    } else if (type == "Strip") {
      std::string content = dj.at("content").get<std::string>();
      int start = dj.value("start", 0), stop = dj.value("stop", 0);
      if (fused) {  // applies to the whole text: only its start can be stripped incrementally
        if (stop != 0) throw Error(str(path_, ": Strip decoder with stop > 0 after Fuse is not supported"));
        strip_content_ = content;
        strip_start_ = start;
      } else {
        per_token.push_back([content, start, stop](std::string& s) {
          tok::strip_leading(s, content, start);
          for (int k = 0; k < stop && s.ends_with(content); ++k) s.resize(s.size() - content.size());
        });
      }
    } else if (type == "Metaspace") {
      std::string rep = dj.value("replacement", std::string(kMetaspace));
      per_token.push_back([rep](std::string& s) { replace_all(s, rep, " "); });
      std::string scheme = dj.value("prepend_scheme", dj.value("add_prefix_space", true) ? "always" : "never");
      if (scheme != "never") {
        strip_content_ = " ";
        strip_start_ = 1;
      }
    } else {
      throw Error(str(path_, ": decoder '", type, "' is not supported"));
    }
  }

  void normalize(std::string& s) const {
    for (const auto& nz : normalizers_) {
      switch (nz.kind) {
        case Normalizer::kPrepend:
          if (!s.empty()) s.insert(0, nz.a);
          break;
        case Normalizer::kReplaceString:
          replace_all(s, nz.a, nz.b);
          break;
        case Normalizer::kUnicode:
          s = tok::unicode_normalize(s, nz.form);
          break;
        case Normalizer::kReplaceRegex: {
          std::string out;
          std::size_t last = 0;
          nz.re->for_each_match(s, [&](std::size_t b, std::size_t e) {
            out.append(s, last, b - last);
            out += nz.b;
            last = e;
          });
          out.append(s, last);
          s = std::move(out);
          break;
        }
      }
    }
  }

  void pre_tokenize(const PreTokenizer& p, bool first_segment, std::vector<std::string>& in,
                    std::vector<std::string>& out) const {
    out.clear();
    std::vector<std::string_view> parts;
    for (std::size_t k = 0; k < in.size(); ++k) {
      std::string& s = in[k];
      switch (p.kind) {
        case PreTokenizer::kSplit: {
          if (p.behavior == PreTokenizer::kIsolated) {
            parts.clear();
            p.re->split_isolated(s, parts);
            for (auto v : parts) out.emplace_back(v);
          } else {
            std::size_t last = 0;
            std::string carry;
            p.re->for_each_match(s, [&](std::size_t b, std::size_t e) {
              std::string gap = s.substr(last, b - last), m = s.substr(b, e - b);
              if (p.behavior == PreTokenizer::kRemoved) {
                if (!gap.empty()) out.push_back(gap);
              } else if (p.behavior == PreTokenizer::kMergedWithPrevious) {
                out.push_back(gap + m);
              } else {  // MergedWithNext
                if (!gap.empty() || !carry.empty()) out.push_back(carry + gap);
                carry = m;
              }
              last = e;
            });
            std::string tail = s.substr(last);
            if (p.behavior == PreTokenizer::kMergedWithNext) tail = carry + tail;
            if (!tail.empty()) out.push_back(tail);
          }
          break;
        }
        case PreTokenizer::kByteLevel: {
          if (p.add_prefix_space && !s.starts_with(' ')) s.insert(0, " ");
          parts.clear();
          if (p.re) p.re->split_isolated(s, parts);
          else parts.push_back(s);
          const auto& t = byte_level();
          for (auto v : parts) {
            std::string m;
            m.reserve(v.size() * 2);
            for (char c : v) m += t.to_char[static_cast<unsigned char>(c)];
            out.push_back(std::move(m));
          }
          break;
        }
        case PreTokenizer::kMetaspace: {
          replace_all(s, " ", p.replacement);
          if ((p.prepend == PreTokenizer::kAlways || (p.prepend == PreTokenizer::kFirst && first_segment && k == 0)) &&
              !s.starts_with(p.replacement))
            s.insert(0, p.replacement);
          if (!p.split) {
            out.push_back(s);
            break;
          }
          std::size_t start = 0;
          for (std::size_t at; (at = s.find(p.replacement, start + 1)) != std::string::npos && start < s.size(); start = at)
            out.push_back(s.substr(start, at - start));
          if (start < s.size()) out.push_back(s.substr(start));
          break;
        }
        case PreTokenizer::kDigits: {
          std::size_t i = 0;
          while (i < s.size()) {
            std::size_t j = i;
            bool digit = std::isdigit(static_cast<unsigned char>(s[i]));
            if (digit && p.individual_digits) j = i + 1;
            else
              while (j < s.size() && bool(std::isdigit(static_cast<unsigned char>(s[j]))) == digit) ++j;
            out.push_back(s.substr(i, j - i));
            i = j;
          }
          break;
        }
      }
    }
  }

  void encode_normalized(std::string_view norm, bool first, std::vector<std::string>& pieces,
                         std::vector<std::string>& next, std::vector<TokenId>& out) const {
    if (norm.empty()) return;
    pieces.clear();
    pieces.emplace_back(norm);
    for (const auto& p : pre_) {
      pre_tokenize(p, first, pieces, next);
      pieces.swap(next);
    }
    for (const auto& piece : pieces)
      if (!piece.empty()) encode_word(piece, out);
  }

  void encode_word(const std::string& w, std::vector<TokenId>& out) const {
    if (ignore_merges_) {
      auto it = vocab_.find(w);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = w.size() <= 64;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(w);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<tok::BpeSymbol> syms;
    syms.reserve(w.size());
    auto push = [&](TokenId id, std::size_t start, std::size_t len) {
      syms.push_back({id, std::int32_t(syms.size()) - 1, -1, std::uint32_t(start), std::uint32_t(len)});
      if (syms.size() > 1) syms[syms.size() - 2].next = std::int32_t(syms.size() - 1);
    };
    for (std::size_t i = 0; i < w.size();) {
      std::size_t n = tok::utf8_char_len(w, i);
      auto it = vocab_.find(std::string_view(w).substr(i, n));
      if (it != vocab_.end()) {
        push(it->second, i, n);
      } else {
        bool done = false;
        if (byte_fallback_) {
          done = true;
          for (std::size_t k = 0; k < n; ++k) done = done && byte_id_[static_cast<unsigned char>(w[i + k])] >= 0;
          if (done)
            for (std::size_t k = 0; k < n; ++k) push(byte_id_[static_cast<unsigned char>(w[i + k])], i + k, 1);
        }
        if (!done) {
          if (unk_ < 0)
            throw Error(str(path_, ": text has a character that is not in the vocabulary and there is no unk_token"));
          if (fuse_unk_ && !syms.empty() && syms.back().id == unk_) syms.back().len += std::uint32_t(n);
          else push(unk_, i, n);
        }
      }
      i += n;
    }
    std::size_t before = out.size();
    tok::bpe_merge(
        syms,
        [&](const tok::BpeSymbol& l, const tok::BpeSymbol& r, tok::BpeMerge& m) {
          auto it = merges_.find(key(l.id, r.id));
          if (it == merges_.end()) return false;
          m = it->second;
          return true;
        },
        out);
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu_);
      if (cache_.size() > 200000) cache_.clear();
      cache_.emplace(w, std::vector<TokenId>(out.begin() + std::ptrdiff_t(before), out.end()));
    }
  }

  std::string path_;
  tok::StringMap<TokenId> vocab_;
  std::unordered_map<std::uint64_t, tok::BpeMerge> merges_;
  std::vector<std::string> tokens_, decoded_;
  std::vector<bool> has_token_, special_;
  std::vector<bool> skip_;  // left out by decode(skip_special): its text is a special token's content
  TokenId unk_ = -1, bos_ = -1, eos_ = -1;
  bool template_bos_ = false;  // the post-processor puts BOS first
  TokenId byte_id_[256] = {};
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false, byte_level_ = false;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_;
  AddedTokenMatcher raw_added_, norm_added_;  // normalized: false / true
  std::string strip_content_;
  int strip_start_ = 0;
  mutable std::mutex cache_mu_;
  mutable tok::StringMap<std::vector<TokenId>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<HfTokenizer>(tokenizer_json_path);
}

}  // namespace linnet
