// Attribute and item access as jinja2's ImmutableSandboxedEnvironment does them, and the
// Python methods templates call on strings, dicts and lists.
#include <algorithm>
#include <cmath>
#include <set>

#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

namespace linnet::jinja {
namespace {

// The sandbox refuses methods that change a list or dict (modifies_known_mutable).
const std::set<std::string> kMutatingList = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
const std::set<std::string> kMutatingDict = {"clear", "pop", "popitem", "setdefault", "update"};

std::string need_string(const std::optional<Value>& v, const char* what) {
  if (!v || !v->is_string()) throw EvalError(str(what, " must be str, not ", v ? v->type_name() : "nothing"));
  return v->as_string();
}

std::optional<std::string> optional_string(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_string(v, what);
}

long optional_int(const std::optional<Value>& v, long fallback) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int()) throw EvalError("an integer is required, got " + v->type_name());
  return long(v->as_int());
}

Value string_list(std::vector<std::string> parts) {
  List out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::list(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw EvalError(str(prefix ? "startswith" : "endswith", " first arg must be str or a tuple of str, not ", a.type_name()));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string pad(const std::string& s, long width, const std::string& fill, char align) {
  long n = long(pystr::length(s));
  if (width <= n) return s;
  long total = width - n;
  budget::check_text(budget::product(std::size_t(total), fill.size()) + s.size());  // before making it
  long left = align == '<' ? 0 : align == '>' ? total : total / 2 + (total & width & 1);
  std::string out;
  for (long i = 0; i < left; ++i) out += fill;
  out += s;
  for (long i = 0; i < total - left; ++i) out += fill;
  return out;
}

Value string_method(const std::string& s, const std::string& name, CallArgs& args) {
  auto arg = [&](std::initializer_list<const char*> names) { return bind_args("str." + name, args, names); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = arg({"chars"});
    return Value(pystr::strip(s, optional_string(a[0], "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto a = arg({"sep", "maxsplit"});
    auto sep = optional_string(a[0], "sep");
    if (sep && sep->empty()) throw EvalError("empty separator");
    long maxsplit = optional_int(a[1], -1);
    return string_list(name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    auto a = arg({"keepends"});
    return string_list(pystr::splitlines(s, a[0] && a[0]->truthy()));
  }
  if (name == "startswith" || name == "endswith") {
    auto a = arg({"prefix", "start", "end"});
    if (!a[0]) throw EvalError(name + "() takes at least 1 argument (0 given)");
    std::string sub = s;
    if (a[1] || a[2]) sub = slice(Value(s), a[1] ? *a[1] : Value::none(), a[2] ? *a[2] : Value::none(), Value::none()).as_string();
    return Value(affix_match(sub, *a[0], name == "startswith"));
  }
  if (name == "upper") return arg({}), Value(pystr::upper(s));
  if (name == "lower") return arg({}), Value(pystr::lower(s));
  if (name == "casefold") return arg({}), Value(pystr::casefold(s));
  if (name == "swapcase") return arg({}), Value(pystr::swapcase(s));
  if (name == "title") return arg({}), Value(pystr::title(s));
  if (name == "capitalize") return arg({}), Value(pystr::capitalize(s));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return arg({}), Value(pystr::is_digit(s));
  if (name == "isalpha") return arg({}), Value(pystr::is_alpha(s));
  if (name == "isalnum") return arg({}), Value(pystr::is_alnum(s));
  if (name == "isspace") return arg({}), Value(pystr::all_space(s));
  if (name == "isupper") return arg({}), Value(pystr::is_upper(s));
  if (name == "islower") return arg({}), Value(pystr::is_lower(s));
  if (name == "replace") {
    auto a = arg({"old", "new", "count"});
    return Value(pystr::replace(s, need_string(a[0], "old"), need_string(a[1], "new"), optional_int(a[2], -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    auto a = arg({"sub"});
    std::string sub = need_string(a[0], "sub");
    long at = name == "find" || name == "index" ? pystr::find(s, sub) : pystr::rfind(s, sub);
    if (at < 0 && name[name.size() - 1] == 'x') throw EvalError("substring not found");
    return Value(std::int64_t(at));
  }
  if (name == "count") {
    auto a = arg({"sub"});
    return Value(std::int64_t(pystr::count(s, need_string(a[0], "sub"))));
  }
  if (name == "join") {
    auto a = arg({"iterable"});
    if (!a[0]) throw EvalError("str.join() takes exactly one argument (0 given)");
    std::string out;
    List items = iterate(*a[0]);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw EvalError(str("sequence item ", i, ": expected str instance, ", items[i].type_name(), " found"));
      if (i) out += s;
      out += items[i].as_string();
      budget::check_text(out.size());
    }
    return Value(out);
  }
  if (name == "format") return Value(format_string(s, args));
  if (name == "zfill") {
    auto a = arg({"width"});
    long width = optional_int(a[0], 0), n = long(pystr::length(s));
    if (width <= n) return Value(s);
    budget::check_text(std::size_t(width - n) + s.size());
    std::size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(std::size_t(width - n), '0') + s.substr(sign));
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    auto a = arg({"width", "fillchar"});
    std::string fill = a[1] ? need_string(a[1], "fillchar") : " ";
    char align = name == "ljust" ? '<' : name == "rjust" ? '>' : '^';
    return Value(pad(s, optional_int(a[0], 0), fill, align));
  }
  if (name == "partition" || name == "rpartition") {
    auto a = arg({"sep"});
    std::string sep = need_string(a[0], "sep");
    auto at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(s)});
    return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = arg({"affix"});
    std::string x = need_string(a[0], "affix");
    if (name == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    return Value(x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
  }
  throw EvalError("'str' object has no attribute '" + name + "'");
}

const std::set<std::string> kStringMethods = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
    "casefold", "swapcase", "title", "capitalize", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace",
    "isupper", "islower", "replace", "find", "rfind", "index", "rindex", "count", "join", "format", "zfill",
    "ljust", "rjust", "center", "partition", "rpartition", "removeprefix", "removesuffix"};

Value dict_method(const Value& d, const std::string& name, CallArgs& args) {
  auto arg = [&](std::initializer_list<const char*> names) { return bind_args("dict." + name, args, names); };
  Dict& dict = d.dict_ref();
  if (name == "items") {
    arg({});
    List out;
    for (const auto& [k, v] : dict.items()) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    arg({});
    List out;
    for (const auto& [k, v] : dict.items()) out.push_back(name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    auto a = arg({"key", "default"});
    if (!a[0]) throw EvalError("get expected at least 1 argument, got 0");
    require_hashable(*a[0]);
    const Value* v = dict.find(*a[0]);
    return v ? *v : a[1] ? *a[1] : Value::none();
  }
  if (name == "copy") {
    arg({});
    return Value::dict(std::make_shared<Dict>(dict));
  }
  throw EvalError("'dict' object has no attribute '" + name + "'");
}

Value list_method(const Value& l, const std::string& name, CallArgs& args) {
  auto a = bind_args("list." + name, args, {"value"});
  if (name == "copy") return Value::list(l.items());
  if (!a[0]) throw EvalError(name + "() takes exactly one argument (0 given)");
  std::int64_t n = 0;
  const List& items = l.items();
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], *a[0])) continue;
    if (name == "index") return Value(std::int64_t(i));
    ++n;
  }
  if (name == "index") throw EvalError(a[0]->repr() + " is not in list");
  return Value(n);
}

Value bound(const Value& obj, const std::string& name, Value (*method)(const Value&, const std::string&, CallArgs&)) {
  return Value::function(name, [obj, name, method](CallArgs& args) { return method(obj, name, args); });
}

Value string_bound(const Value& obj, const std::string& name, CallArgs& args) {
  return string_method(obj.as_string(), name, args);
}

std::string missing_hint(const Value& obj, const Value& key) {
  if (key.is_string()) return str("'", obj.type_name(), "' has no attribute '", key.as_string(), "'");
  return str("'", obj.type_name(), "' has no element ", key.repr());
}

}  // namespace

std::optional<Value> python_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!name.empty() && name[0] == '_') return std::nullopt;  // the sandbox hides private attributes
  switch (obj.kind()) {
    case Value::Kind::String:
      if (kStringMethods.count(name)) return bound(obj, name, string_bound);
      return std::nullopt;
    case Value::Kind::Dict:
      if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy") return bound(obj, name, dict_method);
      if (kMutatingDict.count(name)) return Value::unsafe("access to attribute '" + name + "' of 'dict' object is unsafe.");
      return std::nullopt;
    case Value::Kind::List: case Value::Kind::Tuple:
      if (obj.is_generator()) return std::nullopt;
      if (name == "index" || name == "count" || (name == "copy" && obj.is_list())) return bound(obj, name, list_method);
      if (obj.is_list() && kMutatingList.count(name)) return Value::unsafe("access to attribute '" + name + "' of 'list' object is unsafe.");
      return std::nullopt;
    case Value::Kind::Namespace:
      if (const Value* v = obj.dict_ref().find(Value(name))) return *v;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

namespace {

// Python's obj[key]: nullopt when Python raises TypeError or LookupError.
std::optional<Value> python_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
    return std::nullopt;
  }
  if ((obj.is_sequence() || obj.is_string()) && !obj.is_generator() && key.is_int()) {
    std::int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string u = pystr::decode(obj.as_string());
      std::int64_t n = std::int64_t(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return std::nullopt;
      return Value(pystr::encode(u[std::size_t(i)]));
    }
    std::int64_t n = std::int64_t(obj.items().size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return obj.items()[std::size_t(i)];
  }
  return std::nullopt;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (auto v = python_attr(obj, name)) return *v;
  if (auto v = python_item(obj, Value(name))) return *v;
  return Value::undefined(missing_hint(obj, Value(name)));
}

Value get_item(const Value& obj, const Value& key) {
  if (auto v = python_item(obj, key)) return *v;
  if (key.is_string())
    if (auto v = python_attr(obj, key.as_string())) return *v;
  return Value::undefined(missing_hint(obj, key));
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) obj.fail_undefined();
  auto index = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int()) throw EvalError(str("slice ", what, " must be an integer or None"));
    return v.as_int();
  };
  auto start = index(start_v, "indices"), stop = index(stop_v, "indices"), step_o = index(step_v, "indices");
  std::int64_t step = step_o.value_or(1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  auto pick = [&](std::int64_t n, auto&& take) {
    auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
      if (!v) return fallback;
      std::int64_t i = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<std::int64_t>(i, 0, n);
      return std::clamp<std::int64_t>(i, -1, n - 1);
    };
    std::int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
    for (std::int64_t i = b; step > 0 ? i < e : i > e;) {
      take(std::size_t(i));
      if (__builtin_add_overflow(i, step, &i)) break;  // a step past the 64-bit range ends it
    }
  };
  if (obj.is_string()) {
    std::u32string u = pystr::decode(obj.as_string()), out;
    pick(std::int64_t(u.size()), [&](std::size_t i) { out += u[i]; });
    return Value(pystr::encode(out));
  }
  if (obj.is_sequence() && !obj.is_generator()) {
    List out;
    pick(std::int64_t(obj.items().size()), [&](std::size_t i) { out.push_back(obj.items()[i]); });
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  return Value::undefined(str("'", obj.type_name(), "' has no element slice"));
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.function_ref().call(args);
  if (callee.is_undefined()) callee.fail_undefined();
  throw EvalError("'" + callee.type_name() + "' is not callable");
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      if (v.is_unsafe()) v.fail_undefined();
      return {};
    case Value::Kind::List: case Value::Kind::Tuple:
      budget::steps(std::int64_t(v.items().size()));  // whoever iterates walks them all
      return v.items();
    case Value::Kind::Dict: {
      budget::steps(std::int64_t(v.dict_ref().size()));
      List keys;
      keys.reserve(v.dict_ref().size());
      for (const auto& item : v.dict_ref().items()) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::String: {
      const std::size_t n = pystr::length(v.as_string());
      budget::check_items(n);  // a value per character
      budget::steps(std::int64_t(n));
      List chars;
      chars.reserve(n);
      for (char32_t c : pystr::decode(v.as_string())) chars.emplace_back(pystr::encode(c));
      return chars;
    }
    default:
      throw EvalError("'" + v.type_name() + "' is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) {
    require_hashable(item);
    return container.dict_ref().find(item) != nullptr;
  }
  if (container.is_sequence()) {
    for (const Value& x : container.items())
      if (equals(x, item)) return true;
    return false;
  }
  if (container.is_undefined()) {
    if (container.is_unsafe()) container.fail_undefined();
    return false;
  }
  throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
}

std::int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return std::int64_t(pystr::length(v.as_string()));
    case Value::Kind::List: case Value::Kind::Tuple:
      if (v.is_generator()) throw EvalError("object of type 'generator' has no len()");
      return std::int64_t(v.items().size());
    case Value::Kind::Dict: return std::int64_t(v.dict_ref().size());
    default: throw EvalError("object of type '" + v.type_name() + "' has no len()");
  }
}

std::vector<std::optional<Value>> bind_args(const std::string& function, CallArgs& args,
                                            std::initializer_list<const char*> names) {
  std::vector<std::optional<Value>> out(names.size());
  if (args.positional.size() > names.size())
    throw EvalError(str(function, "() takes at most ", names.size(), " argument(s) (", args.positional.size(), " given)"));
  for (std::size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    std::size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size()) throw EvalError(function + "() got an unexpected keyword argument '" + key + "'");
    if (out[i]) throw EvalError(function + "() got multiple values for argument '" + key + "'");
    out[i] = value;
  }
  return out;
}

}  // namespace linnet::jinja
