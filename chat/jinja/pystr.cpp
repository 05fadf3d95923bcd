#include "chat/jinja/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>
#include <cstdio>

#include "chat/jinja/budget.h"
#include "chat/jinja/case_tables.h"

namespace linnet::jinja::pystr {

// The code point s starts with and its size: UTF-8, plus the three-byte form of a lone
// surrogate (a literal '\ud800': Python keeps it as one code point of a str, length 1); any
// other stray byte stands for itself as U+DC80…U+DCFF (Python's surrogateescape).
std::pair<char32_t, std::size_t> next_code_point(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  if (b[0] < 0x80) return {char32_t(b[0]), 1};
  if (s.size() >= 3 && b[0] == 0xED && (b[1] & 0xE0) == 0xA0 && (b[2] & 0xC0) == 0x80)
    return {char32_t(0xD000 | ((b[1] & 0x3F) << 6) | (b[2] & 0x3F)), 3};
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(b, utf8proc_ssize_t(s.size()), &cp);
  if (n <= 0) return {char32_t(0xDC00 + b[0]), 1};
  return {char32_t(cp), std::size_t(n)};
}

std::size_t code_point_size(std::string_view s) { return s.empty() ? 0 : next_code_point(s).second; }

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    auto [c, n] = next_code_point(s.substr(i));
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string encode(char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) return std::string(1, char(c - 0xDC00));
  if (c >= 0xD800 && c <= 0xDFFF)  // a lone surrogate: its three-byte form, as decode() reads it
    return {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(utf8proc_int32_t(c), buf);
  return std::string(reinterpret_cast<char*>(buf), std::size_t(n));
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) out += encode(c);
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i += next_code_point(s.substr(i)).second) ++n;
  return n;
}

bool is_space(char32_t c) {
  switch (c) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1c: case 0x1d: case 0x1e: case 0x1f: case 0x85: case 0xa0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200a;
  }
}

static utf8proc_category_t category(char32_t c) {
  if (c > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(utf8proc_int32_t(c));
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || long(out.size()) < maxsplit) {
      auto at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      budget::check_items(out.size() + 1);  // the parts become a list
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode(s);
  std::size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && long(out.size()) == maxsplit) {
      std::size_t e = u.size();
      while (e > i && is_space(u[e - 1])) --e;
      out.push_back(encode(std::u32string_view(u).substr(i, e - i)));
      return out;
    }
    std::size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    budget::check_items(out.size() + 1);
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    std::size_t end = s.size();
    while (long(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      auto at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      budget::check_items(out.size() + 1);
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = decode(s);
    std::size_t e = u.size();
    while (e > 0) {
      while (e > 0 && is_space(u[e - 1])) --e;
      if (e == 0) break;
      if (long(out.size()) == maxsplit) {
        std::size_t b = 0;
        while (b < e && is_space(u[b])) ++b;
        out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
        e = 0;
        break;
      }
      std::size_t b = e;
      while (b > 0 && !is_space(u[b - 1])) --b;
      budget::check_items(out.size() + 1);
      out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

static bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode(s);
  std::vector<std::string> out;
  std::size_t i = 0, start = 0;
  while (i < u.size()) {
    if (!is_line_break(u[i])) {
      ++i;
      continue;
    }
    std::size_t eol = i;
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    ++i;
    budget::check_items(out.size() + 1);
    out.push_back(encode(std::u32string_view(u).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < u.size()) out.push_back(encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, long count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` between code points (and at both ends).
    std::u32string u = decode(s);
    const std::size_t n_with = count < 0 ? u.size() + 1 : std::min(u.size() + 1, std::size_t(count));
    budget::check_text(s.size() + budget::product(n_with, with.size()));
    long n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      out += encode(c);
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  std::size_t pos = 0;
  long n = 0;
  while (count < 0 || n < count) {
    auto at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    budget::check_text(out.size() + with.size() + (s.size() - at - old.size()));  // what it will be at least
    out.append(with);
    pos = at + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

long count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return long(length(s)) + 1;
  long n = 0;
  for (std::size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

long find(std::string_view s, std::string_view sub) {
  auto at = s.find(sub);
  return at == std::string_view::npos ? -1 : long(length(s.substr(0, at)));
}

long rfind(std::string_view s, std::string_view sub) {
  auto at = s.rfind(sub);
  return at == std::string_view::npos ? -1 : long(length(s.substr(0, at)));
}

// Python's case mappings: the full ones (one code point to up to three: 'ß' → 'SS') from
// case_tables.h, the one-to-one rest from utf8proc; lower() with the final sigma.
namespace {

enum class Case { Upper, Lower, Title };

template <std::size_t N>
bool in_ranges(const char32_t (&ranges)[N][2], char32_t c) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), c, [](char32_t x, const char32_t(&r)[2]) { return x < r[0]; });
  return it != std::begin(ranges) && c <= (*(it - 1))[1];
}

bool is_lowercase(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LL || in_ranges(tables::kOtherLowercase, c); }
bool is_uppercase(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LU || in_ranges(tables::kOtherUppercase, c); }
bool is_titlecase(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LT; }
bool is_cased(char32_t c) { return is_lowercase(c) || is_uppercase(c) || is_titlecase(c); }
bool is_case_ignorable(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return in_ranges(tables::kOtherCaseIgnorable, c);
  }
}

void append_case(std::u32string& out, char32_t c, Case to) {
  const auto* end = std::end(tables::kSpecialCases);
  const auto* sc = std::lower_bound(std::begin(tables::kSpecialCases), end, c,
                                    [](const tables::SpecialCase& x, char32_t y) { return x.c < y; });
  if (sc != end && sc->c == c) {
    const char32_t* m = to == Case::Upper ? sc->upper : to == Case::Lower ? sc->lower : sc->title;
    for (int i = 0; i < 3 && m[i]; ++i) out += m[i];
    return;
  }
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    out += c;
    return;
  }
  const auto cp = utf8proc_int32_t(c);
  out += char32_t(to == Case::Upper ? utf8proc_toupper(cp) : to == Case::Lower ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
}

// Lowercase u[i] into out: a capital sigma is final (ς) after a cased letter with no cased
// letter after it, case-ignorable letters skipped either way (Unicode's Final_Sigma).
void append_lower(std::u32string& out, const std::u32string& u, std::size_t i) {
  if (u[i] != 0x3A3) return append_case(out, u[i], Case::Lower);
  std::size_t j = i;
  while (j > 0 && is_case_ignorable(u[j - 1])) --j;
  bool final = j > 0 && is_cased(u[j - 1]);
  if (final) {
    j = i + 1;
    while (j < u.size() && is_case_ignorable(u[j])) ++j;
    final = j == u.size() || !is_cased(u[j]);
  }
  out += final ? char32_t(0x3C2) : char32_t(0x3C3);
}

}  // namespace

std::string upper(std::string_view s) {
  std::u32string u = decode(s), out;
  out.reserve(u.size());
  for (char32_t c : u) append_case(out, c, Case::Upper);
  return encode(out);
}

std::string lower(std::string_view s) {
  std::u32string u = decode(s), out;
  out.reserve(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) append_lower(out, u, i);
  return encode(out);
}

std::string title(std::string_view s) {
  std::u32string u = decode(s), out;
  out.reserve(u.size());
  bool previous_cased = false;
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (previous_cased) append_lower(out, u, i);
    else append_case(out, u[i], Case::Title);
    previous_cased = is_cased(u[i]);
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s), out;
  out.reserve(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (i == 0) append_case(out, u[i], Case::Title);
    else append_lower(out, u, i);
  }
  return encode(out);
}

std::string swapcase(std::string_view s) {
  std::u32string u = decode(s), out;
  out.reserve(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (is_uppercase(u[i])) append_lower(out, u, i);
    else if (is_lowercase(u[i])) append_case(out, u[i], Case::Upper);
    else out += u[i];
  }
  return encode(out);
}

std::string casefold(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) {
    utf8proc_int32_t folded[4];
    int boundclass = 0;
    const auto n = c > 0x10FFFF ? 0
                                : utf8proc_decompose_char(utf8proc_int32_t(c), folded, 4, UTF8PROC_CASEFOLD, &boundclass);
    if (n <= 0 || n > 4) out += c;
    else for (int i = 0; i < n; ++i) out += char32_t(folded[i]);
  }
  return encode(out);
}

template <class Pred>
static bool all_of_nonempty(std::string_view s, Pred pred) {
  std::u32string u = decode(s);
  return !u.empty() && std::all_of(u.begin(), u.end(), pred);
}

// Python: at least one cased character, none of the other case, none titlecase.
static bool cased_only(std::string_view s, bool want_upper) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (is_titlecase(c) || (want_upper ? is_lowercase(c) : is_uppercase(c))) return false;
    any = any || (want_upper ? is_uppercase(c) : is_lowercase(c));
  }
  return any;
}

bool is_upper(std::string_view s) { return cased_only(s, true); }
bool is_lower(std::string_view s) { return cased_only(s, false); }
bool is_digit(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; });
}
bool is_alpha(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) {
    auto k = category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
  });
}
bool is_alnum(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) {
    auto k = category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
  });
}
bool all_space(std::string_view s) { return all_of_nonempty(s, is_space); }

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos, has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  out.reserve(s.size() + 2);
  char buf[16];
  auto plain = [quote](char b) { return b >= 0x20 && b < 0x7f && b != quote && b != '\\'; };
  for (std::size_t i = 0; i < s.size();) {
    if (plain(s[i])) {  // a run of ASCII printed as it is, at once
      std::size_t j = i + 1;
      while (j < s.size() && plain(s[j])) ++j;
      out.append(s, i, j - i);
      i = j;
      continue;
    }
    const auto [c, n] = next_code_point(s.substr(i));
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c < 0x7f || is_printable(c)) {
      out.append(s, i, n);  // as written
    } else if (c < 0x100) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    }
    i += n;
  }
  out += quote;
  return out;
}

std::string html_escape(std::string_view s) {
  std::size_t size = s.size();  // measured first: each of & < > " ' grows to 4 or 5 bytes
  for (char c : s) size += c == '&' || c == '"' || c == '\'' ? 4 : c == '<' || c == '>' ? 3 : 0;
  budget::check_text(size);
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace linnet::jinja::pystr
