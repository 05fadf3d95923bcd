// Shared helpers of the tokenizers: files, base64, UTF-8, PCRE2, special-token matching,
// the incremental Decoder and load_tokenizer's choice of format.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "tokenizer/internal.h"

#include <utf8proc.h>

#if LINNET_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace linnet {
namespace tok {

std::string read_file(const std::string& path) { return read_text_file(path, "tokenizer file"); }

std::string unicode_normalize(std::string_view s, UnicodeForm form) {
  int options = UTF8PROC_STABLE;
  if (form == UnicodeForm::nfc || form == UnicodeForm::nfkc) options |= UTF8PROC_COMPOSE;
  else options |= UTF8PROC_DECOMPOSE;
  if (form == UnicodeForm::nfkc || form == UnicodeForm::nfkd) options |= UTF8PROC_COMPAT;
  auto normalize_valid = [&](std::string_view run, std::string& out) {
    if (run.empty()) return;
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                            static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                                            static_cast<utf8proc_option_t>(options));
    if (n < 0) throw Error(str("unicode normalization: ", utf8proc_errmsg(n)));
    out.append(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n));
    std::free(mapped);
  };
  std::string out;
  out.reserve(s.size());
  std::size_t run = 0, i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (len > 0) {
      i += static_cast<std::size_t>(len);
      continue;
    }
    normalize_valid(s.substr(run, i - run), out);  // the valid text before this byte
    out.push_back(s[i]);
    run = ++i;
  }
  normalize_valid(s.substr(run), out);
  return out;
}

bool file_exists(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  require_regular_file(path, what);  // a FIFO or directory there is refused by name, not passed over
  return true;
}

std::string base64_decode(std::string_view in, const std::string& what) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) throw Error(str(what, ": invalid base64 character '", c, "'"));
    acc = (acc << 6) | std::uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::size_t utf8_char_len(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned c = b(i);
  std::size_t n;
  std::uint32_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c < 0x80) return 1;
  else if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else return 1;
  if (i + n > s.size()) return 1;
  if (b(i + 1) < lo || b(i + 1) > hi) return 1;
  for (std::size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 1;
  return n;
}

std::string utf8_encode(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) s.push_back(char(cp));
  else if (cp < 0x800) {
    s.push_back(char(0xc0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    s.push_back(char(0xe0 | (cp >> 12)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    s.push_back(char(0x80 | (cp & 0x3f)));
  } else {
    s.push_back(char(0xf0 | (cp >> 18)));
    s.push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    s.push_back(char(0x80 | (cp & 0x3f)));
  }
  return s;
}

void strip_leading(std::string& piece, std::string_view content, int n) {
  std::size_t at = 0;
  for (int k = 0; k < n && !content.empty() && piece.compare(at, content.size(), content) == 0; ++k)
    at += content.size();
  piece.erase(0, at);
}

// ---- PCRE2 ---------------------------------------------------------------------------

#if LINNET_HAVE_PCRE2
Regex::Regex(const std::string& pattern, bool literal) {
  int err = 0;
  PCRE2_SIZE off = 0;
  std::uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) opts = PCRE2_LITERAL | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   opts, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(str("cannot compile the regular expression '", pattern, "' at offset ", off, ": ",
                    reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if no JIT
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(std::string_view subject,
                           const std::function<void(std::size_t, std::size_t)>& fn) const {
  auto* code = static_cast<pcre2_code*>(code_);
  struct MD {
    pcre2_match_data* p;
    ~MD() { pcre2_match_data_free(p); }
  } md{pcre2_match_data_create(4, nullptr)};
  auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t pos = 0;
  while (pos <= subject.size()) {
    int rc = pcre2_match(code, subj, subject.size(), pos, 0, md.p, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(str("regular expression match failed: ", reinterpret_cast<const char*>(msg)));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.p);
    std::size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: step over one character
      if (b >= subject.size()) break;
      pos = b + utf8_char_len(subject, b);
      continue;
    }
    fn(b, e);
    pos = e;
  }
}
#else
Regex::Regex(const std::string& pattern, bool) {
  throw Error(str("linnet was built without PCRE2: cannot use the regular expression '", pattern, "'"));
}
Regex::~Regex() = default;
void Regex::for_each_match(std::string_view, const std::function<void(std::size_t, std::size_t)>&) const {}
#endif

void Regex::split_isolated(std::string_view subject, std::vector<std::string_view>& out) const {
  std::size_t last = 0;
  for_each_match(subject, [&](std::size_t b, std::size_t e) {
    if (b > last) out.push_back(subject.substr(last, b - last));
    out.push_back(subject.substr(b, e - b));
    last = e;
  });
  if (last < subject.size()) out.push_back(subject.substr(last));
}

// ---- special tokens --------------------------------------------------------------------

void SpecialMatcher::add(const std::string& text, TokenId id) {
  if (text.empty()) return;
  first_[static_cast<unsigned char>(text[0])] = true;
  by_len_.emplace_back(text, id);
  std::stable_sort(by_len_.begin(), by_len_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::size_t SpecialMatcher::match_at(std::string_view text, std::size_t i, TokenId& id) const {
  std::string_view rest = text.substr(i);
  for (const auto& [s, tid] : by_len_)
    if (rest.starts_with(s)) {
      id = tid;
      return s.size();
    }
  return 0;
}

}  // namespace tok

// ---- Tokenizer / Decoder ---------------------------------------------------------------

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string out;
  bool at_start = true;
  for (TokenId id : ids) decode_token(id, skip_special, at_start, out);
  return out;
}

Decoder Tokenizer::decoder(bool skip_special) const { return Decoder(*this, skip_special); }

std::size_t utf8_incomplete_tail(std::string_view s) {
  // Find the last lead byte within the last 4 bytes.
  std::size_t n = s.size();
  for (std::size_t k = 1; k <= 4 && k <= n; ++k) {
    unsigned c = static_cast<unsigned char>(s[n - k]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking back
    std::size_t need = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
    if (need <= k) return 0;  // complete (or not a multi-byte lead)
    // Check the bytes so far are a valid beginning (second-byte ranges of E0/ED/F0/F4).
    if (k >= 2) {
      unsigned c1 = static_cast<unsigned char>(s[n - k + 1]);
      unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
      unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
      if (c1 < lo || c1 > hi) return 0;
    }
    return k;
  }
  return 0;
}

std::string Decoder::push(TokenId id) {
  tok_->decode_token(id, skip_special_, at_start_, pending_);
  std::size_t hold = utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string Decoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

namespace {

// A SentencePiece model is a protobuf (first byte 0x0a: field 1, the pieces); a tiktoken rank
// file is text lines "<base64 token> <rank>".
bool is_tiktoken_file(const std::string& model) {
  std::string head;
  {
    std::ifstream in(model, std::ios::binary);
    if (!in) throw Error(str("cannot open ", model));
    head.resize(256);
    in.read(head.data(), std::streamsize(head.size()));
    head.resize(std::size_t(in.gcount()));
  }
  std::size_t eol = head.find('\n');
  std::string_view line = std::string_view(head).substr(0, eol == std::string::npos ? head.size() : eol);
  std::size_t sp = line.find(' ');
  return sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
         std::all_of(line.begin(), line.begin() + std::ptrdiff_t(sp),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '='; }) &&
         std::all_of(line.begin() + std::ptrdiff_t(sp) + 1, line.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '\r'; });
}

// Python's truth value of a JSON value (what `if add_bos_token:` sees).
bool truthy(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_null()) return false;
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0;
  return !v.empty();  // strings, lists, objects: non-empty
}

nlohmann::json read_json_if_any(const std::string& path, const std::string& what) {
  if (!tok::file_exists(path, what)) return nlohmann::json();
  nlohmann::json j = read_json_file(path, what);
  return j.is_object() ? j : nlohmann::json();
}

}  // namespace

BosChoice choose_add_bos(const std::string& checkpoint_dir, const Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  const fs::path dir(checkpoint_dir);
  const nlohmann::json tc = read_json_if_any((dir / "tokenizer_config.json").string(), "tokenizer config");
  const bool has_bos = tokenizer.bos_id() >= 0;
  auto result = [&](bool add, std::string why) {
    if (add && !has_bos) return BosChoice{false, why + "; but the vocabulary has no BOS token"};
    return BosChoice{add, std::move(why)};
  };
  enum { kJson, kSentencePiece, kTiktoken, kLlama2c } kind;
  if (tok::file_exists((dir / "tokenizer.json").string(), "tokenizer")) kind = kJson;
  else if (tok::file_exists((dir / "tokenizer.model").string(), "tokenizer"))
    kind = is_tiktoken_file((dir / "tokenizer.model").string()) ? kTiktoken : kSentencePiece;
  else kind = kLlama2c;

  // tokenizer.bin: transformers cannot read it; linnet's own rule.
  if (kind == kLlama2c) {
    if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean())
      return result(tc["add_bos_token"].get<bool>(), "tokenizer.bin: tokenizer_config.json's add_bos_token");
    return result(tokenizer.adds_bos(), "tokenizer.bin: llama2.c puts BOS first");
  }

  // The class transformers 5.24's AutoTokenizer picks: config.json's model_type qwen2 always
  // gives Qwen2Tokenizer; else tokenizer_config.json's tokenizer_class (without "Fast");
  // else TokenizersBackend.
  const nlohmann::json config = read_json_if_any((dir / "config.json").string(), "model config");
  std::string cls;
  if (config.contains("model_type") && config["model_type"] == "qwen2") {
    cls = "Qwen2Tokenizer";
  } else if (tc.contains("tokenizer_class") && tc["tokenizer_class"].is_string()) {
    cls = tc["tokenizer_class"].get<std::string>();
    if (cls.ends_with("Fast")) cls.resize(cls.size() - 4);
  }
  if (cls.empty() || cls == "PreTrainedTokenizer") cls = "TokenizersBackend";
  // bos_token: tokenizer_config.json's when it has the key (null: none; an AddedToken
  // object: its content), else the class's default.
  auto bos_token_given = [&](bool& none) {
    if (!tc.contains("bos_token")) return false;
    const auto& b = tc["bos_token"];
    none = b.is_null() || (b.is_object() && b.contains("content") && b["content"].is_null());
    return true;
  };

  if (kind == kJson) {
    // transformers drops add_bos_token when there is a tokenizer.json and keeps its
    // post-processor, except for the classes that rebuild it from their own defaults.
    if (cls == "GPTNeoXTokenizer") return result(false, "tokenizer.json with GPTNeoXTokenizer: its post-processor is rebuilt without BOS");
    if (cls == "CodeLlamaTokenizer") {
      bool none = false;
      if (bos_token_given(none) && none) return result(false, "tokenizer.json with CodeLlamaTokenizer and bos_token null");
      return result(true, "tokenizer.json with CodeLlamaTokenizer: its post-processor is rebuilt with BOS");
    }
    return result(tokenizer.adds_bos(), tokenizer.adds_bos()
                                            ? "tokenizer.json: its post-processor puts BOS first (add_bos_token is not read)"
                                            : "tokenizer.json: its post-processor adds no BOS (add_bos_token is not read)");
  }

  // tokenizer.model (SentencePiece or tiktoken, converted by transformers): BOS when
  // add_bos_token (default: false, true for CodeLlamaTokenizer) and the class has a bos_token.
  const std::string file = kind == kTiktoken ? "tokenizer.model (tiktoken)" : "tokenizer.model (SentencePiece)";
  bool add = cls == "CodeLlamaTokenizer";
  std::string why = add ? "CodeLlamaTokenizer adds BOS by default" : "add_bos_token is not set (default false)";
  if (tc.contains("add_bos_token")) {
    add = truthy(tc["add_bos_token"]);
    why = str("add_bos_token is ", tc["add_bos_token"].dump());
  }
  bool none = false;
  if (bos_token_given(none)) {
    if (none) return result(false, str(file, ": ", why, ", bos_token is null"));
  } else if (cls == "Qwen2Tokenizer") {
    return result(false, str(file, " with Qwen2Tokenizer: no bos_token"));
  } else if (cls == "TokenizersBackend" && kind == kTiktoken) {
    return result(false, str(file, " with ", cls, ": no bos_token"));
  } else if (cls == "TokenizersBackend" && !has_bos) {
    return result(false, str(file, ": the model has no BOS piece"));
  }
  return result(add, str(file, " with ", cls, ": ", why));
}

bool add_bos_by_default(const std::string& checkpoint_dir, const Tokenizer& tokenizer) {
  return choose_add_bos(checkpoint_dir, tokenizer).add;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& checkpoint_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(checkpoint_dir, ec)) throw Error(str(checkpoint_dir, ": no such checkpoint directory (tokenizer: not a directory)"));
  if (!fs::is_directory(checkpoint_dir, ec))
    throw Error(str(checkpoint_dir, ": a checkpoint is a directory (its tokenizer files beside config.json), not a file "
                    "(tokenizer: not a directory)"));
  const std::string json = (fs::path(checkpoint_dir) / "tokenizer.json").string();
  const std::string model = (fs::path(checkpoint_dir) / "tokenizer.model").string();
  const std::string bin = (fs::path(checkpoint_dir) / "tokenizer.bin").string();
  if (tok::file_exists(json, "tokenizer")) return load_hf_tokenizer(json);
  if (tok::file_exists(model, "tokenizer"))
    return is_tiktoken_file(model) ? load_tiktoken_tokenizer(model) : load_sentencepiece_tokenizer(model);
  if (tok::file_exists(bin, "tokenizer")) return load_llama2c_tokenizer(bin);
  throw Error(str("tokenizer: ", checkpoint_dir,
                  " holds no tokenizer.json, tokenizer.model or tokenizer.bin"));
}

}  // namespace linnet
