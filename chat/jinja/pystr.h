// Python's str operations on UTF-8 text: what Python counts and changes per code point
// (lengths, slices, strip, split, case), so templates see strings as Python does.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace linnet::jinja::pystr {

// UTF-8 to code points: a stray byte becomes U+DC80…U+DCFF (Python's surrogateescape, and
// encode() writes it back), a lone surrogate's three-byte form its code point.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
std::string encode(char32_t c);
std::size_t length(std::string_view s);
// The code point s (not empty) starts with and its size in bytes, as decode() reads them.
std::pair<char32_t, std::size_t> next_code_point(std::string_view s);
// The bytes of the code point s starts with, as decode() counts them (a stray byte: 1).
std::size_t code_point_size(std::string_view s);

bool is_space(char32_t c);  // str.isspace()
bool is_printable(char32_t c);  // str.isprintable(), for repr()

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string replace(std::string_view s, std::string_view old, std::string_view with, long count);
long count(std::string_view s, std::string_view sub);
// Code point index of the first/last occurrence, or -1.
long find(std::string_view s, std::string_view sub);
long rfind(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// Python's full case mappings ('ß'.upper() == 'SS', 'İ'.lower() == 'i̇', a final 'Σ' lowered
// to 'ς'), as the Unicode version of the Python that wrote case_tables.h.
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string swapcase(std::string_view s);    // str.swapcase()
std::string casefold(std::string_view s);    // str.casefold()
bool is_upper(std::string_view s);
bool is_lower(std::string_view s);
bool is_digit(std::string_view s);
bool is_alpha(std::string_view s);
bool is_alnum(std::string_view s);
bool all_space(std::string_view s);

std::string repr(std::string_view s);         // 'it\'s' → "it's", as Python picks quotes
std::string html_escape(std::string_view s);  // markupsafe.escape

}  // namespace linnet::jinja::pystr
