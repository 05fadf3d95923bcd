// jinja2's built-in filters and tests (filters.py, tests.py), with transformers' tojson.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

namespace linnet::jinja {
namespace {

using Filter = std::function<Value(const Value&, CallArgs&)>;
using Test = std::function<bool(const Value&, CallArgs&)>;

// soft_str: Markup stays Markup, everything else becomes str().
Value soft_str(const Value& v) { return v.is_markup() ? v : Value(v.str()); }

Value arg_or(const std::optional<Value>& v, Value fallback) { return v ? *v : fallback; }

// make_attrgetter: "a.b.0" looked up with getitem part by part, `default` for undefined parts.
std::function<Value(const Value&)> attr_getter(const std::optional<Value>& attribute, const std::optional<Value>& fallback = {},
                                               bool ignore_case = false) {
  std::vector<Value> parts;
  if (attribute && !attribute->is_none()) {
    if (attribute->is_string()) {
      for (const auto& p : pystr::split(attribute->as_string(), std::string("."), -1)) {
        bool digits = !p.empty() && p.find_first_not_of("0123456789") == std::string::npos;
        parts.push_back(digits ? Value(std::int64_t(std::stoll(p))) : Value(p));
      }
    } else {
      parts.push_back(*attribute);
    }
  }
  return [parts, fallback, ignore_case](const Value& item) {
    Value v = item;
    for (const Value& p : parts) {
      v = get_item(v, p);
      if (fallback && !fallback->is_none() && v.is_undefined()) v = *fallback;
    }
    if (ignore_case && v.is_string()) v = Value(pystr::lower(v.as_string()));
    return v;
  };
}

bool case_sensitive(const std::optional<Value>& v) { return v && v->truthy(); }

// sorted(items, key=key, reverse=reverse): stable either way, as Python's.
List sorted(List items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) keyed.emplace_back(key(x), x);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  List out;
  for (auto& k : keyed) out.push_back(std::move(k.second));
  return out;
}

CallArgs rest_args(CallArgs& args, std::size_t skip) {
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + long(std::min(skip, args.positional.size())), args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

// int(s, base) for a string: nullopt where Python raises ValueError; past 64 bits an
// error (Python's int would be exact).
std::optional<std::int64_t> parse_int(std::string s, int base) {
  s = pystr::strip(s, std::nullopt, true, true);
  std::string digits;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(s[i + 1])))
      continue;
    digits += s[i];
  }
  if (digits.empty() || std::isspace(static_cast<unsigned char>(digits[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (end == digits.c_str() || end != digits.c_str() + digits.size()) return std::nullopt;
  if (errno == ERANGE) throw EvalError("integer overflow in int('" + s + "'): template integers are 64-bit");
  return v;
}

std::optional<double> parse_float(const Value& v) {
  if (v.is_number()) return v.as_float();
  if (!v.is_string()) return std::nullopt;
  std::string s = pystr::strip(v.as_string(), std::nullopt, true, true), clean;
  for (char c : s)
    if (c != '_') clean += c;
  std::string lower = pystr::lower(clean);
  for (const char* word : {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"})
    if (lower == word) return std::strtod(lower.c_str(), nullptr);
  if (clean.empty() || clean.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// round(i, ndigits) for an int: itself, or (ndigits < 0) the nearest multiple of
// 10**-ndigits, halves to even, as Python's.
Value round_int(std::int64_t i, std::int64_t ndigits) {
  if (ndigits >= 0) return Value(i);
  if (ndigits < -19) return Value(std::int64_t{0});  // |i| < 10**19 / 2
  __int128 m = 1;
  for (std::int64_t k = 0; k < -ndigits; ++k) m *= 10;
  __int128 q = i / m, r = i % m;
  if (r < 0) r += m, q -= 1;  // floor division
  if (2 * r > m || (2 * r == m && q % 2 != 0)) q += 1;
  const __int128 result = q * m;
  if (result > std::numeric_limits<std::int64_t>::max() || result < std::numeric_limits<std::int64_t>::min())
    throw EvalError("integer overflow in round: template integers are 64-bit");
  return Value(std::int64_t(result));
}

// round(x, ndigits) for a float, as Python's: the exact binary value rounded at that decimal
// place, halves to even (printf does that for places after the point; before it, the exact
// integer digits are rounded here).
double round_float(double x, std::int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 323) return x;
  if (ndigits < -308) return 0.0 * x;
  if (ndigits >= 0) {
    const int n = std::snprintf(nullptr, 0, "%.*f", int(ndigits), x);
    std::string text(std::size_t(n), '\0');
    std::snprintf(text.data(), text.size() + 1, "%.*f", int(ndigits), x);
    return std::strtod(text.c_str(), nullptr);
  }
  const double whole = std::floor(std::fabs(x));
  const bool fraction = whole != std::fabs(x);
  const int n = std::snprintf(nullptr, 0, "%.0f", whole);
  std::string digits(std::size_t(n), '\0');
  std::snprintf(digits.data(), digits.size() + 1, "%.0f", whole);  // exact: it is an integer
  const std::size_t k = std::size_t(-ndigits);
  if (digits.size() < k) digits.insert(0, k - digits.size(), '0');
  std::string head = digits.substr(0, digits.size() - k), tail = digits.substr(digits.size() - k);
  const std::string half = "5" + std::string(k - 1, '0');
  const int against_half = tail.compare(half);
  const bool head_odd = !head.empty() && (head.back() - '0') % 2 == 1;
  if (against_half > 0 || (against_half == 0 && (fraction || head_odd))) {
    std::size_t at = head.size();  // head + 1, in decimal
    while (at > 0 && head[at - 1] == '9') head[--at] = '0';
    if (at == 0) head.insert(0, "1");
    else ++head[at - 1];
  }
  const double r = head.empty() ? 0.0 : std::strtod((head + std::string(k, '0')).c_str(), nullptr);
  return std::copysign(r, x);
}

Value do_round(const Value& v, CallArgs& args) {
  auto a = bind_args("round", args, {"precision", "method"});
  if (a[0] && !a[0]->is_int()) throw EvalError("'" + python_type_name(*a[0]) + "' object cannot be interpreted as an integer");
  std::int64_t precision = a[0] ? a[0]->as_int() : 0;
  std::string method = a[1] ? a[1]->str() : "common";
  if (method != "common" && method != "ceil" && method != "floor") throw EvalError("method must be common, ceil or floor");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) throw EvalError("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") return v.is_float() ? Value(round_float(v.as_float(), precision)) : round_int(v.as_int(), precision);
  // jinja2: math.ceil/floor(value * 10 ** precision) / 10 ** precision. An int times a power
  // of ten is exact in Python: the value itself comes back, as a float.
  if (v.is_int() && precision >= 0) return Value(v.as_float());
  if (precision > 308) throw EvalError("int too large to convert to float");
  const double scale = std::pow(10.0, double(precision));
  const double x = v.as_float() * scale, r = method == "ceil" ? std::ceil(x) : std::floor(x);
  if (std::isnan(r)) throw EvalError("cannot convert float NaN to integer");
  if (std::isinf(r)) throw EvalError("cannot convert float infinity to integer");
  return Value(r / scale);
}

Value do_indent(const Value& v, CallArgs& args) {
  auto a = bind_args("indent", args, {"width", "first", "blank"});
  if (!v.is_string()) {
    if (v.is_undefined()) v.fail_undefined();
    throw EvalError("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  }
  if (a[0] && !a[0]->is_string() && !a[0]->is_int())
    throw EvalError("can't multiply sequence by non-int of type '" + a[0]->type_name() + "'");
  const bool first = a[1] && a[1]->truthy(), blank = a[2] && a[2]->truthy();
  const bool by_string = a[0] && a[0]->is_string();
  const std::size_t width = by_string ? a[0]->as_string().size() : std::size_t(std::max<std::int64_t>(0, a[0] ? a[0]->as_int() : 4));
  std::string s = v.as_string() + "\n";  // jinja2's quirk, for splitlines
  std::vector<std::string> lines = pystr::splitlines(s);
  // What it will make, measured before anything is made (indent(10**9) would be gigabytes).
  std::size_t indented = first ? 1 : 0;
  for (std::size_t i = 1; i < lines.size(); ++i) indented += blank || !lines[i].empty() ? 1 : 0;
  budget::check_text(s.size() + budget::product(indented, width));
  const std::string indention = by_string ? a[0]->as_string() : std::string(width, ' ');
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (std::size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += '\n';
        if (!lines[i].empty()) rv += indention + lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return Value(rv, v.is_markup());
}

Value do_title(const Value& v) {
  std::u32string u = pystr::decode(soft_str(v).as_string()), out;
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || pystr::is_space(c); };
  std::size_t i = 0;
  while (i < u.size()) {
    std::size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    std::string item = pystr::encode(std::u32string_view(u).substr(i, j - i));
    out += pystr::decode(pystr::upper(pystr::encode(u[i])) + pystr::lower(pystr::encode(std::u32string_view(u).substr(i + 1, j - i - 1))));
    i = j;
  }
  return Value(pystr::encode(out));
}

std::int64_t word_count(const std::string& s) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(s)) {
    bool w = c == '_' || pystr::is_alnum(pystr::encode(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

Value select_or_reject(const Value& v, CallArgs& args, bool select, bool lookup_attr) {
  std::function<Value(const Value&)> trans = [](const Value& x) { return x; };
  std::size_t at = 0;
  if (lookup_attr) {
    if (args.positional.empty()) throw EvalError("Missing parameter for attribute name");
    trans = attr_getter(args.positional[0]);
    at = 1;
  }
  std::function<bool(const Value&)> test = [](const Value& x) { return x.truthy(); };
  if (args.positional.size() > at) {
    std::string name = args.positional[at].str();
    CallArgs rest = rest_args(args, at + 1);
    test = [name, rest](const Value& x) mutable { return apply_test(name, x, rest); };
  }
  List out;
  if (v.truthy())
    for (const Value& item : iterate(v))
      if (test(trans(item)) == select) out.push_back(item);
  return Value::generator(std::move(out));
}

Value do_map(const Value& v, CallArgs& args) {
  std::function<Value(const Value&)> fn;
  if (args.positional.empty()) {
    std::optional<Value> attribute, fallback;
    for (auto& [k, x] : args.keyword) {
      if (k == "attribute") attribute = x;
      else if (k == "default") fallback = x;
      else throw EvalError("Unexpected keyword argument '" + k + "'");
    }
    if (!attribute) throw EvalError("map requires a filter argument");
    fn = attr_getter(attribute, fallback);
  } else {
    std::string name = args.positional[0].str();
    CallArgs rest = rest_args(args, 1);
    fn = [name, rest](const Value& x) mutable { return apply_filter(name, x, rest); };
  }
  List out;
  if (v.truthy())
    for (const Value& item : iterate(v)) out.push_back(fn(item));
  return Value::generator(std::move(out));
}

Value min_or_max(const Value& v, CallArgs& args, bool max) {
  auto a = bind_args(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = attr_getter(a[1], {}, !case_sensitive(a[0]));
  Value best = items[0], best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? less(best_key, k) : less(k, best_key)) best = items[i], best_key = k;
  }
  return best;
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = [] {
    std::map<std::string, Filter> f;
    f["abs"] = [](const Value& v, CallArgs& args) {
      bind_args("abs", args, {});
      if (!v.is_number()) throw EvalError("bad operand type for abs(): '" + v.type_name() + "'");
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (v.as_int() == std::numeric_limits<std::int64_t>::min())
        throw EvalError("integer overflow in abs: template integers are 64-bit");
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    };
    f["attr"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("attr", args, {"name"});
      std::string name = a[0] ? a[0]->str() : "";
      if (auto x = python_attr(v, name)) return *x;
      return Value::undefined(str("'", v.type_name(), "' has no attribute '", name, "'"));
    };
    f["batch"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("batch", args, {"linecount", "fill_with"});
      std::int64_t n = a[0] ? a[0]->as_int() : 1;
      List out, tmp;
      for (const Value& item : iterate(v)) {
        if (std::int64_t(tmp.size()) == n) out.push_back(Value::list(std::exchange(tmp, {})));
        tmp.push_back(item);
      }
      if (!tmp.empty()) {
        if (a[1] && !a[1]->is_none()) {
          budget::check_items(std::size_t(n));  // filled up to n items
          while (std::int64_t(tmp.size()) < n) tmp.push_back(*a[1]);
        }
        out.push_back(Value::list(std::move(tmp)));
      }
      return Value::generator(std::move(out));
    };
    f["capitalize"] = [](const Value& v, CallArgs& args) { bind_args("capitalize", args, {}); return Value(pystr::capitalize(soft_str(v).as_string())); };
    f["center"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("center", args, {"width"});
      CallArgs c{{a[0] ? *a[0] : Value(80)}, {}};
      return get_attr(soft_str(v), "center").function_ref().call(c);
    };
    f["default"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("default", args, {"default_value", "boolean"});
      if (v.is_undefined() || (a[1] && a[1]->truthy() && !v.truthy())) return arg_or(a[0], Value(""));
      return v;
    };
    f["d"] = f["default"];
    f["dictsort"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("dictsort", args, {"case_sensitive", "by", "reverse"});
      std::string by = a[1] ? a[1]->str() : "key";
      if (by != "key" && by != "value") throw EvalError("You can only sort by either \"key\" or \"value\"");
      if (!v.is_dict()) throw EvalError("'" + v.type_name() + "' has no attribute 'items'");
      List items;
      for (const auto& [k, x] : v.dict_ref().items()) items.push_back(Value::tuple({k, x}));
      bool ignore = !case_sensitive(a[0]);
      std::size_t pos = by == "key" ? 0 : 1;
      return Value::list(sorted(items, [pos, ignore](const Value& item) {
        Value x = item.items()[pos];
        return ignore && x.is_string() ? Value(pystr::lower(x.as_string())) : x;
      }, a[2] && a[2]->truthy()));
    };
    f["escape"] = [](const Value& v, CallArgs& args) {
      bind_args("escape", args, {});
      return v.is_markup() ? v : Value(pystr::html_escape(v.str()), true);
    };
    f["e"] = f["escape"];
    f["forceescape"] = [](const Value& v, CallArgs& args) { bind_args("forceescape", args, {}); return Value(pystr::html_escape(v.str()), true); };
    f["first"] = [](const Value& v, CallArgs& args) {
      bind_args("first", args, {});
      List items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
    };
    f["last"] = [](const Value& v, CallArgs& args) {
      bind_args("last", args, {});
      if (v.is_generator()) throw EvalError("'generator' object is not reversible");
      List items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["float"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("float", args, {"default"});
      auto d = parse_float(v);
      return d ? Value(*d) : arg_or(a[0], Value(0.0));
    };
    f["format"] = [](const Value& v, CallArgs& args) {
      Value fargs;
      if (!args.keyword.empty()) {
        auto d = std::make_shared<Dict>();
        for (auto& [k, x] : args.keyword) d->set(Value(k), x);
        fargs = Value::dict(d);
      } else {
        fargs = Value::tuple(args.positional);
      }
      return Value(percent_format(soft_str(v).as_string(), fargs), v.is_markup());
    };
    f["int"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("int", args, {"default", "base"});
      Value fallback = arg_or(a[0], Value(0));
      // As jinja2: int(value) (with the base for a string), then int(float(value)) when that
      // raised ValueError or TypeError, then the default on ValueError, TypeError or
      // OverflowError. A float's infinity is an error (int() raises OverflowError outside the
      // fallback); past 64 bits is one too (Python's int would be exact).
      if (v.is_int()) return Value(v.as_int());
      if (v.is_float() && std::isinf(v.as_float())) return Value(int_of_float(v.as_float()));
      if (v.is_string())
        if (auto i = parse_int(v.as_string(), a[1] ? int(a[1]->as_int()) : 10)) return Value(*i);
      auto d = parse_float(v);
      if (!d || std::isnan(*d) || std::isinf(*d)) return fallback;
      return Value(int_of_float(*d));
    };
    f["items"] = [](const Value& v, CallArgs& args) {
      bind_args("items", args, {});
      if (v.is_undefined()) return Value::generator({});
      if (!v.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
      List out;
      for (const auto& [k, x] : v.dict_ref().items()) out.push_back(Value::tuple({k, x}));
      return Value::generator(std::move(out));
    };
    f["indent"] = do_indent;
    f["join"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("join", args, {"d", "attribute"});
      std::string sep = a[0] ? a[0]->str() : "";
      auto get = attr_getter(a[1]);
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += (a[1] ? get(item) : item).str();
        budget::check_text(out.size());
      }
      return Value(out);
    };
    f["length"] = [](const Value& v, CallArgs& args) { bind_args("length", args, {}); return Value(py_len(v)); };
    f["count"] = f["length"];
    f["list"] = [](const Value& v, CallArgs& args) { bind_args("list", args, {}); return Value::list(iterate(v)); };
    f["lower"] = [](const Value& v, CallArgs& args) { bind_args("lower", args, {}); return Value(pystr::lower(soft_str(v).as_string())); };
    f["upper"] = [](const Value& v, CallArgs& args) { bind_args("upper", args, {}); return Value(pystr::upper(soft_str(v).as_string())); };
    f["map"] = do_map;
    f["max"] = [](const Value& v, CallArgs& args) { return min_or_max(v, args, true); };
    f["min"] = [](const Value& v, CallArgs& args) { return min_or_max(v, args, false); };
    f["reject"] = [](const Value& v, CallArgs& args) { return select_or_reject(v, args, false, false); };
    f["rejectattr"] = [](const Value& v, CallArgs& args) { return select_or_reject(v, args, false, true); };
    f["select"] = [](const Value& v, CallArgs& args) { return select_or_reject(v, args, true, false); };
    f["selectattr"] = [](const Value& v, CallArgs& args) { return select_or_reject(v, args, true, true); };
    f["replace"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("replace", args, {"old", "new", "count"});
      if (!a[0] || !a[1]) throw EvalError("replace() missing required arguments");
      long count = a[2] && !a[2]->is_none() ? long(a[2]->as_int()) : -1;
      return Value(pystr::replace(v.str(), a[0]->str(), a[1]->str(), count));
    };
    f["reverse"] = [](const Value& v, CallArgs& args) {
      bind_args("reverse", args, {});
      if (v.is_string()) return slice(v, Value::none(), Value::none(), Value(-1));
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return v.is_generator() ? Value::list(std::move(items)) : Value::generator(std::move(items));
    };
    f["round"] = do_round;
    f["safe"] = [](const Value& v, CallArgs& args) { bind_args("safe", args, {}); return Value(v.str(), true); };
    f["sort"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("sort", args, {"reverse", "case_sensitive", "attribute"});
      return Value::list(sorted(iterate(v), attr_getter(a[2], {}, !case_sensitive(a[1])), a[0] && a[0]->truthy()));
    };
    f["string"] = [](const Value& v, CallArgs& args) { bind_args("string", args, {}); return soft_str(v); };
    f["sum"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("sum", args, {"attribute", "start"});
      Value total = arg_or(a[1], Value(0));
      auto get = attr_getter(a[0]);
      for (const Value& item : iterate(v)) total = binary_op("+", total, get(item));
      return total;
    };
    f["title"] = [](const Value& v, CallArgs& args) { bind_args("title", args, {}); return do_title(v); };
    f["tojson"] = tojson;
    f["trim"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("trim", args, {"chars"});
      std::optional<std::string> chars;
      if (a[0] && !a[0]->is_none()) chars = a[0]->str();
      return Value(pystr::strip(soft_str(v).as_string(), chars, true, true));
    };
    f["unique"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("unique", args, {"case_sensitive", "attribute"});
      auto key = attr_getter(a[1], {}, !case_sensitive(a[0]));
      List out;
      Dict seen;  // a set, as jinja2's: constant-time lookups, unhashable items refused
      for (const Value& item : iterate(v)) {
        Value k = key(item);
        if (seen.find(k)) continue;
        seen.set(k, Value::none());
        out.push_back(item);
      }
      return Value::generator(std::move(out));
    };
    f["wordcount"] = [](const Value& v, CallArgs& args) { bind_args("wordcount", args, {}); return Value(word_count(soft_str(v).as_string())); };
    return f;
  }();
  return table;
}

bool compare_test(const char* op, const Value& v, CallArgs& args) {
  auto a = bind_args(op, args, {"other"});
  if (!a[0]) throw EvalError(std::string(op) + "() missing 1 required positional argument: 'other'");
  return compare_op(op, v, *a[0]);
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = [] {
    std::map<std::string, Test> t;
    auto none_args = [](const char* name, std::function<bool(const Value&)> fn) {
      return [name, fn](const Value& v, CallArgs& args) {
        bind_args(name, args, {});
        return fn(v);
      };
    };
    t["defined"] = none_args("defined", [](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = none_args("undefined", [](const Value& v) { return v.is_undefined(); });
    t["none"] = none_args("none", [](const Value& v) { return v.is_none(); });
    t["boolean"] = none_args("boolean", [](const Value& v) { return v.is_bool(); });
    t["true"] = none_args("true", [](const Value& v) { return v.is_bool() && v.as_bool(); });
    t["false"] = none_args("false", [](const Value& v) { return v.is_bool() && !v.as_bool(); });
    t["integer"] = none_args("integer", [](const Value& v) { return v.kind() == Value::Kind::Int; });
    t["float"] = none_args("float", [](const Value& v) { return v.is_float(); });
    t["number"] = none_args("number", [](const Value& v) { return v.is_number(); });
    t["string"] = none_args("string", [](const Value& v) { return v.is_string(); });
    t["mapping"] = none_args("mapping", [](const Value& v) { return v.is_dict(); });
    t["sequence"] = none_args("sequence", [](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_sequence() && !v.is_generator());
    });
    t["iterable"] = none_args("iterable", [](const Value& v) { return v.is_undefined() || v.is_string() || v.is_dict() || v.is_sequence(); });
    t["callable"] = none_args("callable", [](const Value& v) { return v.is_callable(); });
    t["escaped"] = none_args("escaped", [](const Value& v) { return v.is_markup(); });
    t["lower"] = none_args("lower", [](const Value& v) { return pystr::is_lower(v.str()); });
    t["upper"] = none_args("upper", [](const Value& v) { return pystr::is_upper(v.str()); });
    auto parity = [](bool odd) {
      return [odd](const Value& v, CallArgs& args) {
        bind_args(odd ? "odd" : "even", args, {});
        if (!v.is_number()) throw EvalError("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
        Value r = binary_op("%", v, Value(2));
        return odd ? equals(r, Value(1)) : equals(r, Value(0));
      };
    };
    t["odd"] = parity(true);
    t["even"] = parity(false);
    t["divisibleby"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("divisibleby", args, {"num"});
      if (!a[0]) throw EvalError("divisibleby() missing 1 required positional argument: 'num'");
      return equals(binary_op("%", v, *a[0]), Value(0));
    };
    t["sameas"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("sameas", args, {"other"});
      return a[0] && v.same_object(*a[0]);
    };
    t["in"] = [](const Value& v, CallArgs& args) {
      auto a = bind_args("in", args, {"seq"});
      if (!a[0]) throw EvalError("in() missing 1 required positional argument: 'seq'");
      return contains(*a[0], v);
    };
    t["filter"] = none_args("filter", [](const Value& v) { return v.is_string() && has_filter(v.as_string()); });
    t["test"] = none_args("test", [](const Value& v) { return v.is_string() && has_test(v.as_string()); });
    for (auto [names, op] : std::vector<std::pair<std::vector<const char*>, const char*>>{
             {{"eq", "equalto", "=="}, "=="}, {{"ne", "!="}, "!="}, {{"lt", "lessthan", "<"}, "<"},
             {{"gt", "greaterthan", ">"}, ">"}, {{"le", "<="}, "<="}, {{"ge", ">="}, ">="}}) {
      const char* which = op;  // a structured binding cannot be captured before C++20 compilers catch up (clang 14)
      for (const char* n : names)
        t[n] = [which](const Value& v, CallArgs& args) { return compare_test(which, v, args); };
    }
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw EvalError("No filter named '" + name + "' found.");
  return it->second(input, args);
}

bool apply_test(const std::string& name, const Value& input, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw EvalError("No test named '" + name + "' found.");
  return it->second(input, args);
}

}  // namespace linnet::jinja
