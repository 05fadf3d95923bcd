// Python's arithmetic and comparison operators on template values.
#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

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

// Python's float // and %: from fmod, so that 1 // 0.1 is 9.0 (floor(1 / 0.1) would be
// 10.0), a zero remainder takes the divisor's sign, and a zero quotient the true one's.
std::pair<double, double> float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

// a / b for ints as Python divides them: the exact quotient rounded once (converting a large
// int to a float first would round twice: (2**63 - 1) / 3).
double int_true_divide(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kExact = std::int64_t{1} << 53;  // ints a double holds exactly
  if (a > -kExact && a < kExact && b > -kExact && b < kExact) return double(a) / double(b);
  const bool negative = (a < 0) != (b < 0);
  const unsigned __int128 n = a < 0 ? 0 - static_cast<unsigned __int128>(a) : static_cast<unsigned __int128>(a);
  const unsigned __int128 d = b < 0 ? 0 - static_cast<unsigned __int128>(b) : static_cast<unsigned __int128>(b);
  if (n == 0) return negative ? -0.0 : 0.0;
  // (n << shift) / d has at least 62 significant bits; a remainder sets its lowest bit (a
  // sticky bit, far below the 53 a double keeps), so one conversion rounds as the exact
  // quotient would.
  const int shift = 127 - (64 - __builtin_clzll(static_cast<unsigned long long>(n)));
  const unsigned __int128 scaled = n << shift;
  unsigned __int128 q = scaled / d;
  if (scaled % d != 0) q |= 1;
  const double r = std::ldexp(static_cast<double>(q), -shift);
  return negative ? -r : r;
}

bool is_odd_integer(double x) { return std::fmod(std::fabs(x), 2.0) == 1.0; }

// Python's float ** float: the cases Python defines itself, a ZeroDivisionError for 0.0 to a
// negative power, an OverflowError for a finite result too large, and (where Python would
// give a complex number) an error: template values have no complex numbers.
double float_pow(double x, double y) {
  if (y == 0) return 1.0;
  if (std::isnan(x)) return x;
  if (std::isnan(y)) return x == 1.0 ? 1.0 : y;
  if (std::isinf(y)) {
    const double ax = std::fabs(x);
    if (ax == 1.0) return 1.0;
    return (y > 0) == (ax > 1.0) ? std::fabs(y) : 0.0;
  }
  if (std::isinf(x)) {
    if (y > 0) return is_odd_integer(y) ? x : std::fabs(x);
    return is_odd_integer(y) ? std::copysign(0.0, x) : 0.0;
  }
  if (x == 0) {
    if (y < 0) throw EvalError("0.0 cannot be raised to a negative power");
    return is_odd_integer(y) ? x : 0.0;
  }
  if (x < 0 && y != std::floor(y))
    throw EvalError("a negative number to a fractional power is a complex number, which templates do not have");
  const double r = std::pow(x, y);
  if (std::isinf(r)) throw EvalError("(34, 'Numerical result out of range')");
  return r;
}

// A string or sequence times n, measured before it is made (Limits::max_bytes: Python would
// try, and run out of memory).
Value repeat(const Value& seq, std::int64_t n) {
  const std::size_t size = seq.is_string() ? seq.as_string().size() : seq.items().size();
  if (n <= 0 || size == 0) return seq.is_string() ? Value("", seq.is_markup()) : seq.is_tuple() ? Value::tuple({}) : Value::list();
  const std::size_t total = budget::product(size, std::size_t(n));
  if (seq.is_string()) {
    budget::check_text(total);
    std::string out;
    out.reserve(total);
    for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out), seq.is_markup());
  }
  budget::check_items(total);
  List out;
  out.reserve(total);
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// a + b for strings, measured first.
std::string concat(const std::string& a, const std::string& b) {
  budget::check_text(a.size() + b.size());
  std::string out;
  out.reserve(a.size() + b.size());
  return out.append(a).append(b);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(concat(a.str(), b.str()));
  check_defined(a, b);
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) return floats ? Value(a.as_float() + b.as_float()) : Value(checked("+", a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      // markupsafe: adding plain text to Markup escapes the text.
      if (a.is_markup() != b.is_markup())
        return Value(a.is_markup() ? concat(a.as_string(), pystr::html_escape(b.as_string()))
                                   : concat(pystr::html_escape(a.as_string()), b.as_string()),
                     true);
      return Value(concat(a.as_string(), b.as_string()), a.is_markup());
    }
    if (a.is_sequence() && a.kind() == b.kind() && !a.is_generator() && !b.is_generator()) {
      budget::check_items(a.items().size() + b.items().size());
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
    if (b.as_float() == 0) throw EvalError(floats ? "float division by zero" : "division by zero");
    return Value(floats ? a.as_float() / b.as_float() : int_true_divide(a.as_int(), b.as_int()));
  }
  if (op == "//") {
    if (!numbers) unsupported("//", a, b);
    if (b.as_float() == 0) throw EvalError(floats ? "float floor division by zero" : "integer division or modulo by zero");
    if (floats) return Value(float_divmod(a.as_float(), b.as_float()).first);
    return Value(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (a.is_string()) {
      std::string out = percent_format(a.as_string(), b);
      return Value(out, a.is_markup());
    }
    if (!numbers) unsupported("%", a, b);
    if (b.as_float() == 0) throw EvalError(floats ? "float modulo" : "integer modulo by zero");
    if (floats) return Value(float_divmod(a.as_float(), b.as_float()).second);
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
    return Value(float_pow(a.as_float(), b.as_float()));  // an int to a negative power too, as Python's
  }
  throw EvalError("unknown operator " + op);
}

std::int64_t int_of_float(double f) {
  if (std::isnan(f)) throw EvalError("cannot convert float NaN to integer");
  if (std::isinf(f)) throw EvalError("cannot convert float infinity to integer");
  if (f >= 9223372036854775808.0 || f < -9223372036854775808.0)
    throw EvalError("integer overflow in int(" + float_repr(f) + "): template integers are 64-bit");
  return static_cast<std::int64_t>(f);  // truncates toward zero, as int() does
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
