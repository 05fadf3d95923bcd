// Python's string formatting as templates use it: str.format (through the sandbox's
// formatter) and the % operator. The format spec mini-language is covered for fill, align,
// sign, zero padding, width, precision and the d/f/e/g/s/x/o/b types.
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

namespace linnet::jinja {
namespace {

// printf's rendering of x with a precision (as long as it takes: '%.400f' is 400 digits).
std::string printf_double(const char* format, long precision, double x) {
  const int p = int(std::min<long>(precision, std::numeric_limits<int>::max()));
  const int n = std::snprintf(nullptr, 0, format, p, x);
  if (n < 0) throw EvalError("the number cannot be formatted");
  std::string out(std::size_t(n), '\0');
  std::snprintf(out.data(), out.size() + 1, format, p, x);
  return out;
}

std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.str();
  std::u32string u = pystr::decode(spec);
  std::size_t i = 0;
  std::string fill = " ";
  char align = 0, sign = '-';
  bool zero = false;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (u.size() >= 2 && is_align(u[1])) {
    fill = pystr::encode(u[0]);
    align = char(u[1]);
    i = 2;
  } else if (!u.empty() && is_align(u[0])) {
    align = char(u[0]);
    i = 1;
  }
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) sign = char(u[i++]);
  if (i < u.size() && u[i] == '0') {
    zero = true;
    ++i;
  }
  // Widths and precisions are text to be made: past Limits::max_bytes they are refused
  // before anything is allocated (and long before the digits could overflow).
  auto number = [&] {
    long n = 0;
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') {
      if (n > (std::numeric_limits<long>::max() - 9) / 10) throw EvalError("Too many decimal digits in format string");
      n = n * 10 + long(u[i++] - '0');
    }
    budget::check_text(std::size_t(n));
    return n;
  };
  long width = number(), precision = -1;
  if (i < u.size() && u[i] == '.') {
    ++i;
    precision = number();
  }
  char type = i < u.size() ? char(u[i++]) : 0;
  if (i != u.size()) throw EvalError("Invalid format specifier '" + spec + "'");

  std::string body;
  bool numeric = v.is_number();
  if (v.is_string() || v.is_undefined()) {
    if (type && type != 's') throw EvalError(str("Unknown format code '", type, "' for object of type 'str'"));
    body = v.str();
    if (precision >= 0) body = pystr::encode(pystr::decode(body).substr(0, std::size_t(precision)));
  } else if (numeric) {
    double f = v.as_float();
    bool negative = v.is_int() ? v.as_int() < 0 : std::signbit(f);
    // The int's magnitude, for INT64_MIN too (its negation does not fit).
    const std::uint64_t magnitude = v.as_int() < 0 ? 0 - std::uint64_t(v.as_int()) : std::uint64_t(v.as_int());
    if (type == 0 && v.is_int() && precision < 0) type = 'd';
    switch (type) {
      case 'd':
        if (!v.is_int()) throw EvalError("Unknown format code 'd' for object of type 'float'");
        body = std::to_string(magnitude);
        break;
      case 'x': case 'X': case 'o': case 'b': {
        if (!v.is_int()) throw EvalError(str("Unknown format code '", type, "' for object of type 'float'"));
        std::uint64_t n = magnitude;
        int base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
        do {
          int d = int(n % std::uint64_t(base));
          body.insert(body.begin(), char(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
          n /= std::uint64_t(base);
        } while (n);
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case '%':
        body = printf_double(type == '%' ? "%.*f" : (std::string("%.*") + type).c_str(), precision < 0 ? 6 : precision,
                             std::fabs(type == '%' ? f * 100 : f));
        if (type == '%') body += '%';
        break;
      case 'g': case 'G':
        body = printf_double(type == 'g' ? "%.*g" : "%.*G", precision < 0 ? 6 : precision, std::fabs(f));
        break;
      case 0:
        body = precision >= 0 ? printf_double("%.*g", precision == 0 ? 1 : precision, std::fabs(f)) : float_repr(std::fabs(f));
        break;
      default:
        throw EvalError(str("Unknown format code '", type, "' for object of type '", v.type_name(), "'"));
    }
    std::string sign_text = negative ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    if (zero && !align) {
      align = '=';
      fill.assign(1, '0');  // (not = "0": a GCC 12 -Wrestrict false positive)
    }
    long n = long(pystr::length(body) + sign_text.size());
    if (align == '=' && width > n) {
      budget::check_text(budget::product(std::size_t(width - n), fill.size()) + body.size());
      std::string padding;
      for (long k = 0; k < width - n; ++k) padding += fill;
      body = sign_text + padding + body;
    } else {
      body = sign_text + body;
    }
  } else {
    if (type) throw EvalError(str("Unsupported format string passed to ", v.type_name(), ".__format__"));
    body = v.str();
  }
  long n = long(pystr::length(body));
  if (width <= n) return body;
  if (!align) align = numeric ? '>' : '<';
  long total = width - n, left = align == '>' ? total : align == '^' ? total / 2 : 0;
  budget::check_text(budget::product(std::size_t(total), fill.size()) + body.size());
  std::string out;
  for (long k = 0; k < left; ++k) out += fill;
  out += body;
  for (long k = 0; k < total - left; ++k) out += fill;
  return out;
}

}  // namespace

std::string format_string(const std::string& fmt, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else throw EvalError("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    auto close = fmt.find('}', i);
    if (close == std::string::npos) throw EvalError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1), spec, conversion;
    if (auto colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (auto bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
    }
    std::size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty() || std::isdigit(static_cast<unsigned char>(head[0]))) {
      std::size_t index = head.empty() ? auto_index++ : std::size_t(std::stoul(head));
      if (index >= args.positional.size()) throw EvalError(str("Replacement index ", index, " out of range for positional args tuple"));
      v = args.positional[index];
    } else {
      bool found = false;
      for (auto& [k, x] : args.keyword)
        if (k == head) v = x, found = true;
      if (!found) throw EvalError("KeyError: '" + head + "'");
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        std::size_t next = field.find_first_of(".[", end + 1);
        v = get_attr(v, field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
        end = next;
      } else {
        std::size_t rb = field.find(']', end);
        if (rb == std::string::npos) throw EvalError("Missing ']' in format string");
        std::string key = field.substr(end + 1, rb - end - 1);
        bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = digits ? get_item(v, Value(std::int64_t(std::stoll(key)))) : get_item(v, Value(key));
        end = rb + 1;
      }
    }
    if (conversion == "r" || conversion == "a") v = Value(v.repr());
    else if (conversion == "s") v = Value(v.str());
    else if (!conversion.empty()) throw EvalError("Unknown conversion specifier " + conversion);
    out += apply_spec(v, spec);
    budget::check_text(out.size());
    i = close;
  }
  return out;
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::string out;
  std::size_t next_arg = 0;
  List positional = args.is_tuple() ? args.items() : List{args};
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw EvalError("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    Value v;
    if (fmt[i] == '(') {
      auto close = fmt.find(')', i);
      if (close == std::string::npos || !args.is_dict()) throw EvalError("format requires a mapping");
      v = get_item(args, Value(fmt.substr(i + 1, close - i - 1)));
      i = close + 1;
    } else {
      if (next_arg >= positional.size()) throw EvalError("not enough arguments for format string");
      v = positional[next_arg++];
    }
    std::string spec;
    while (i < fmt.size() && std::string("-+ #0123456789.").find(fmt[i]) != std::string::npos) spec += fmt[i++];
    if (i >= fmt.size()) throw EvalError("incomplete format");
    char type = fmt[i];
    if (!spec.empty() && spec[0] == '-') spec[0] = '<';  // %-5s: left-aligned
    if (type == 's') out += apply_spec(Value(v.str()), spec);
    else if (type == 'r' || type == 'a') out += apply_spec(Value(v.repr()), spec);
    else if (type == 'd' || type == 'i' || type == 'u') {
      if (!v.is_number()) throw EvalError("%d format: a real number is required, not " + v.type_name());
      out += apply_spec(Value(v.is_int() ? v.as_int() : int_of_float(v.as_float())), spec + "d");
    } else if (std::string("feEgGxXo").find(type) != std::string::npos) {
      if (!v.is_number()) throw EvalError(str("%", type, " format: a real number is required, not ", v.type_name()));
      out += apply_spec(std::string("xXo").find(type) != std::string::npos ? v : Value(v.as_float()), spec + type);
    } else {
      throw EvalError(str("unsupported format character '", type, "'"));
    }
    budget::check_text(out.size());
  }
  if (!args.is_dict() && next_arg < positional.size()) throw EvalError("not all arguments converted during string formatting");
  return out;
}

}  // namespace linnet::jinja
