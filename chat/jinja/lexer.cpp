#include "chat/jinja/lexer.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "chat/jinja/pystr.h"

namespace linnet::jinja {

void syntax_error(int line, int column, const std::string& what) {
  throw TemplateError(str("line ", line, ", column ", column, ": ", what));
}

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// jinja2's \s: Python's Unicode whitespace.
std::string rstrip_all(std::string_view s) { return pystr::strip(s, std::nullopt, false, true); }
bool all_whitespace(std::string_view s) { return pystr::all_space(s); }

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it.
std::string unescape(std::string_view s, int line, int column) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    auto hex = [&](int digits) {
      std::uint32_t v = 0;
      for (int k = 1; k <= digits; ++k) {
        char h = i + k < s.size() ? s[i + k] : 'x';
        int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) syntax_error(line, column, "truncated escape in string");
        v = v * 16 + std::uint32_t(d);
      }
      i += std::size_t(digits);
      return v;
    };
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': out += pystr::encode(char32_t(hex(2))); break;
      case 'u': out += pystr::encode(char32_t(hex(4))); break;
      case 'U': {
        const std::uint32_t v = hex(8);
        if (v > 0x10FFFF) syntax_error(line, column, "illegal Unicode character");
        out += pystr::encode(char32_t(v));
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          std::uint32_t v = std::uint32_t(c - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) v = v * 8 + std::uint32_t(s[++i] - '0');
          out += pystr::encode(char32_t(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

const char* kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                            ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  Lexer(std::string source, const Options& options) : src_(std::move(source)), opt_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    push(Token::Type::End, "", pos_);
    return std::move(tokens_);
  }

 private:
  std::string src_;
  Options opt_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;

  // Tokens come in order, so the line and column count carry on from the last one asked for
  // (counting each token's column from its line's start would cost a long line's length per
  // token: 30,000 parentheses on one line took seconds).
  mutable std::size_t seen_ = 0;
  mutable int seen_line_ = 1, seen_column_ = 0;  // column: code points since the line's start

  void locate(std::size_t at, int& line, int& column) const {
    if (at < seen_) seen_ = 0, seen_line_ = 1, seen_column_ = 0;  // an error pointing back: count again
    while (seen_ < at && seen_ < src_.size()) {
      if (src_[seen_] == '\n') {
        ++seen_line_;
        seen_column_ = 0;
        ++seen_;
        continue;
      }
      seen_ += pystr::code_point_size(std::string_view(src_).substr(seen_, at - seen_));
      ++seen_column_;
    }
    line = seen_line_;
    column = seen_column_ + 1;
  }

  Token& push(Token::Type type, std::string text, std::size_t at) {
    Token t{type, std::move(text)};
    locate(at, t.line, t.column);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    int line, column;
    locate(at, line, column);
    syntax_error(line, column, what);
  }

  bool at(std::size_t p, const char* s) const { return src_.compare(p, std::strlen(s), s) == 0; }

  // The text before a tag, with `sign` ('-', '+' or 0) and lstrip_blocks applied.
  void emit_text(std::size_t begin, std::size_t end, char sign, bool is_variable) {
    std::string text = src_.substr(begin, end - begin);
    if (sign == '-') {
      text = rstrip_all(text);
    } else if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      auto nl = text.rfind('\n');
      std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_whitespace(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
    if (!text.empty()) push(Token::Type::Data, std::move(text), begin);
  }

  // Where a `{% raw %}` opener starting at p ends (after its %}), or npos.
  std::size_t raw_begin_end(std::size_t p) const {
    std::size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    while (q < src_.size() && is_ascii_space(src_[q])) ++q;
    if (!at(q, "raw")) return std::string::npos;
    q += 3;
    while (q < src_.size() && is_ascii_space(src_[q])) ++q;
    if (at(q, "-%}")) {
      q += 3;
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      return q;
    }
    if (at(q, "%}")) return q + 2;
    return std::string::npos;
  }

  // A tag's closer at p: its length (with the whitespace it eats), or 0.
  std::size_t closer(std::size_t p, char kind, bool trim) const {
    char close[3] = {kind, '}', 0};
    if (src_[p] == '+' && at(p + 1, close)) return 3;
    if (src_[p] == '-' && at(p + 1, close)) {
      std::size_t q = p + 3;
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      return q - p;
    }
    if (at(p, close)) return trim && opt_.trim_blocks && p + 2 < src_.size() && src_[p + 2] == '\n' ? 3 : 2;
    return 0;
  }

  void root() {
    std::size_t p = src_.find('{', pos_);
    while (p != std::string::npos && p + 1 < src_.size() && src_[p + 1] != '{' && src_[p + 1] != '%' && src_[p + 1] != '#')
      p = src_.find('{', p + 1);
    if (p == std::string::npos || p + 1 >= src_.size()) {
      push(Token::Type::Data, src_.substr(pos_), pos_);
      pos_ = src_.size();
      return;
    }
    char kind = src_[p + 1];
    char sign = p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
    if (kind == '%') {
      std::size_t raw_end = raw_begin_end(p);
      if (raw_end != std::string::npos) {
        emit_text(pos_, p, sign, false);
        raw(p, raw_end);
        return;
      }
    }
    emit_text(pos_, p, sign, kind == '{');
    line_starting_ = false;
    pos_ = p + 2 + (sign ? 1 : 0);
    if (kind == '#') comment(p);
    else tag(kind == '{' ? '}' : '%', p);
  }

  void comment(std::size_t open) {
    for (std::size_t p = pos_; p < src_.size(); ++p) {
      if (std::size_t n = closer(p, '#', true)) {
        pos_ = p + n;
        line_starting_ = src_[pos_ - 1] == '\n';
        return;
      }
    }
    fail(open, "Missing end of comment tag");
  }

  void raw(std::size_t open, std::size_t body) {
    for (std::size_t p = body; p + 1 < src_.size(); ++p) {
      if (!at(p, "{%")) continue;
      std::size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      if (!at(q, "endraw")) continue;
      q += 6;
      while (q < src_.size() && is_ascii_space(src_[q])) ++q;
      std::size_t n = q < src_.size() ? closer(q, '%', true) : 0;
      if (!n) continue;
      line_starting_ = src_[body - 1] == '\n';  // did the opener's match end a line
      emit_text(body, p, sign, false);
      pos_ = q + n;
      line_starting_ = src_[pos_ - 1] == '\n';
      return;
    }
    fail(open, "Missing end of raw directive");
  }

  // Tokens inside {{ }} (close '}') or {% %} (close '%') up to the closer.
  void tag(char close, std::size_t open) {
    push(close == '}' ? Token::Type::VariableBegin : Token::Type::BlockBegin, "", open);
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail(open, close == '}' ? "unexpected end of template, expected 'end of print statement'" : "unexpected end of template, expected 'end of statement block'");
      if (balance.empty()) {
        if (std::size_t n = closer(pos_, close, close == '%')) {
          push(close == '}' ? Token::Type::VariableEnd : Token::Type::BlockEnd, "", pos_);
          pos_ += n;
          line_starting_ = src_[pos_ - 1] == '\n';
          return;
        }
      }
      char c = src_[pos_];
      if (is_ascii_space(c)) {
        ++pos_;
        continue;
      }
      if (is_digit(c)) {
        number();
        continue;
      }
      if (is_name_start(c)) {
        std::size_t b = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        push(Token::Type::Name, src_.substr(b, pos_ - b), b);
        continue;
      }
      if (c == '\'' || c == '"') {
        string_literal();
        continue;
      }
      const char* op = nullptr;
      for (const char* o : kOperators)
        if (at(pos_, o)) {
          op = o;
          break;
        }
      if (!op) fail(pos_, str("unexpected char ", pystr::repr(pystr::encode(pystr::decode(src_.substr(pos_, 4))[0])), " at ", pos_));
      std::string o(op);
      if (o == "(" || o == "[" || o == "{") {
        balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      } else if (o == ")" || o == "]" || o == "}") {
        if (balance.empty()) fail(pos_, "unexpected '" + o + "'");
        if (balance.back() != o[0]) fail(pos_, str("unexpected '", o, "', expected '", balance.back(), "'"));
        balance.pop_back();
      }
      push(Token::Type::Operator, o, pos_);
      pos_ += o.size();
    }
  }

  void string_literal() {
    char q = src_[pos_];
    std::size_t b = pos_;
    std::size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != q) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) fail(b, str("unexpected char ", pystr::repr(std::string(1, q)), " at ", b));
    Token& t = push(Token::Type::String, "", b);
    t.text = unescape(std::string_view(src_).substr(b + 1, p - b - 1), t.line, t.column);
    pos_ = p + 1;
  }

  // Digits with optional '_' separators; returns the end.
  std::size_t digits(std::size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return p;
    while (p < src_.size()) {
      if (is_digit(src_[p])) ++p;
      else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])) p += 2;
      else break;
    }
    return p;
  }

  void number() {
    std::size_t b = pos_;
    char c1 = b + 1 < src_.size() ? char(src_[b + 1] | 0x20) : 0;
    if (src_[b] == '0' && (c1 == 'x' || c1 == 'o' || c1 == 'b')) {
      int base = c1 == 'x' ? 16 : c1 == 'o' ? 8 : 2;
      std::size_t p = b + 2;
      std::int64_t v = 0;
      bool any = false, overflow = false;
      while (p < src_.size()) {
        char c = src_[p];
        if (c == '_') {
          ++p;
          continue;
        }
        int d = is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) break;
        overflow = overflow || v > (std::numeric_limits<std::int64_t>::max() - d) / base;
        if (!overflow) v = v * base + d;
        any = true;
        ++p;
      }
      if (overflow)  // past 64 bits, as the decimal ones below
        fail(b, "integer literal out of range: " + std::string(src_.substr(b, p - b)));
      if (any) {
        push(Token::Type::Integer, src_.substr(b, p - b), b).integer = v;
        pos_ = p;
        return;
      }
    }
    std::size_t p = digits(b);
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      p = digits(p + 1);
      is_float = true;
    }
    if (p < src_.size() && (src_[p] | 0x20) == 'e') {
      std::size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      std::size_t e = digits(q);
      if (e > q) {
        p = e;
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = b; i < p; ++i)
      if (src_[i] != '_') text += src_[i];
    if (is_float) {
      // As Python's float(): past the range, inf (or 0), never an error (std::stod throws).
      push(Token::Type::Float, text, b).number = std::strtod(text.c_str(), nullptr);
    } else {
      Token& t = push(Token::Type::Integer, text, b);
      try {
        t.integer = std::stoll(text);
      } catch (const std::out_of_range&) {
        fail(b, "integer literal out of range: " + text);
      }
    }
    pos_ = p;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const Options& options) {
  // jinja2 reads every \r\n, \r and \n as \n, and drops one trailing newline.
  std::string s;
  s.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!options.keep_trailing_newline && !s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s), options).run();
}

}  // namespace linnet::jinja
