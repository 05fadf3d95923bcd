// Python's arithmetic and comparison operators on template values.
#include <cmath>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace linnet::jinja {
namespace {

std::string type_of(const Value& v) {
  std::string t = v.type_name();
  auto sp = t.find(' ');
  return sp == std::string::npos ? t : t.substr(0, sp);
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand type(s) for " + op + ": '" + type_of(a) + "' and '" + type_of(b) + "'");
}

void check_defined(const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
}

// Integers are 64-bit (docs/chat_templates.md): where Python's would grow past that, the
// template fails with an error instead (never a wrapped or undefined result).
[[noreturn]] void overflow(const char* op) {
  throw EvalError(std::string("integer overflow in ") + op + ": template integers are 64-bit");
}
std::int64_t checked(const char* op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  const bool bad = op[0] == '+' ? __builtin_add_overflow(a, b, &r)
                   : op[0] == '-' ? __builtin_sub_overflow(a, b, &r)
                                  : __builtin_mul_overflow(a, b, &r);
  if (bad) overflow(op);
  return r;
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (a == std::numeric_limits<std::int64_t>::min() && b == -1) overflow("//");
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// A string or sequence times n: at most 64 Mi characters or items (Python would try, and run
// out of memory; a template that asks for more fails instead).
Value repeat(const Value& seq, std::int64_t n) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 26;
  const std::int64_t size = static_cast<std::int64_t>(seq.is_string() ? seq.as_string().size() : seq.items().size());
  if (n > 0 && size > 0 && n > kLimit / size)
    throw EvalError("repeating a " + type_of(seq) + " of length " + std::to_string(size) + " " + std::to_string(n) +
                    " times is more than 64 Mi " + (seq.is_string() ? "characters" : "items"));
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(out, seq.is_markup());
  }
  List out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  check_defined(a, b);
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) return floats ? Value(a.as_float() + b.as_float()) : Value(checked("+", a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      // markupsafe: adding plain text to Markup escapes the text.
      if (a.is_markup() != b.is_markup())
        return Value(a.is_markup() ? a.as_string() + pystr::html_escape(b.as_string()) : pystr::html_escape(a.as_string()) + b.as_string(), true);
      return Value(a.as_string() + b.as_string(), a.is_markup());
    }
    if (a.is_sequence() && a.kind() == b.kind() && !a.is_generator() && !b.is_generator()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string())
      throw EvalError(a.is_string() ? "can only concatenate str (not \"" + type_of(b) + "\") to str" : "unsupported operand type(s) for +: '" + type_of(a) + "' and 'str'");
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported("-", a, b);
    return floats ? Value(a.as_float() - b.as_float()) : Value(checked("-", a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (numbers) return floats ? Value(a.as_float() * b.as_float()) : Value(checked("*", a.as_int(), b.as_int()));
    if ((a.is_string() || (a.is_sequence() && !a.is_generator())) && b.is_int()) return repeat(a, b.as_int());
    if ((b.is_string() || (b.is_sequence() && !b.is_generator())) && a.is_int()) return repeat(b, a.as_int());
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported("/", a, b);
    if (b.as_float() == 0) throw EvalError("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!numbers) unsupported("//", a, b);
    if (b.as_float() == 0) throw EvalError("integer division or modulo by zero");
    if (floats) return Value(std::floor(a.as_float() / b.as_float()));
    return Value(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (a.is_string()) {
      std::string out = percent_format(a.as_string(), b);
      return Value(out, a.is_markup());
    }
    if (!numbers) unsupported("%", a, b);
    if (b.as_float() == 0) throw EvalError("integer division or modulo by zero");
    if (floats) return Value(float_mod(a.as_float(), b.as_float()));
    if (b.as_int() == -1) return Value(std::int64_t{0});  // x % -1 (also for the smallest x)
    return Value(a.as_int() - floor_div(a.as_int(), b.as_int()) * b.as_int());
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) {
      std::int64_t r = 1, base = a.as_int();
      for (std::int64_t e = b.as_int(); e > 0;) {
        if (e & 1) r = checked("**", r, base);
        e >>= 1;
        if (e > 0) base = checked("**", base, base);
      }
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  throw EvalError("unknown operator " + op);
}

Value unary_op(const std::string& op, const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (!a.is_number()) throw EvalError("bad operand type for unary " + op + ": '" + type_of(a) + "'");
  if (op == "+") return a.is_float() ? Value(a.as_float()) : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_float());
  if (a.as_int() == std::numeric_limits<std::int64_t>::min()) overflow("unary -");
  return Value(-a.as_int());
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equals(a, b);
  if (op == ">=") return less(b, a) || equals(a, b);
  throw EvalError("unknown comparison " + op);
}

}  // namespace linnet::jinja
