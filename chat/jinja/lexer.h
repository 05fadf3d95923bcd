// The tokens of a template, cut exactly as jinja2's lexer cuts them: text between tags
// (with whitespace control, trim_blocks and lstrip_blocks applied), then the tokens inside
// {{ }} and {% %}. Comments and raw blocks are resolved here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/jinja.h"

namespace linnet::jinja {

struct Token {
  enum class Type { Data, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };
  Type type;
  std::string text;  // data, name, operator, or the unescaped string
  std::int64_t integer = 0;
  double number = 0;
  int line = 1, column = 1;
};

std::vector<Token> tokenize(std::string_view source, const Options& options);

// "line L, column C: what" — how every syntax error reads.
[[noreturn]] void syntax_error(int line, int column, const std::string& what);

}  // namespace linnet::jinja
