#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja/pystr.h"

namespace linnet::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::unsafe(std::string message) {
  Value v = undefined(std::move(message));
  v.unsafe_ = true;
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(std::int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double f) : kind_(Kind::Float), f_(f) {}
Value::Value(std::string s, bool markup)
    : kind_(Kind::String), markup_(markup), s_(std::make_shared<std::string>(std::move(s))) {}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::generator(List items) {
  Value v = list(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = d ? std::move(d) : std::make_shared<Dict>();
  return v;
}

Value Value::namespace_(std::shared_ptr<Dict> attrs) {
  Value v = dict(std::move(attrs));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(Function{std::move(name), std::move(call)});
  return v;
}

void Value::fail_undefined() const {
  std::string hint = s_ ? *s_ : std::string();
  if (unsafe_) throw EvalError(hint);
  throw EvalError(hint.empty() ? "undefined value" : hint);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined: return false;
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !s_->empty();
    case Kind::List: case Kind::Tuple: return generator_ || !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    default: return true;
  }
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  auto e_at = sci.find('e');
  int exp = std::stoi(sci.substr(e_at + 1));
  std::string digits;
  for (char c : sci.substr(0, e_at))
    if (c != '.') digits += c;
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return sign + "0." + std::string(std::size_t(-exp - 1), '0') + digits;
  if (digits.size() <= std::size_t(exp) + 1)
    return sign + digits + std::string(std::size_t(exp) + 1 - digits.size(), '0') + ".0";
  return sign + digits.substr(0, std::size_t(exp) + 1) + "." + digits.substr(std::size_t(exp) + 1);
}

// The containers being printed: a namespace can hold itself, and Python prints the inner
// occurrence as {...} / [...] instead of recursing (Py_ReprEnter).
thread_local std::vector<const void*> printing;

struct Printing {
  const void* p;
  bool again;
  explicit Printing(const void* x) : p(x), again(std::find(printing.begin(), printing.end(), x) != printing.end()) {
    if (!again) printing.push_back(p);
  }
  ~Printing() {
    if (!again) printing.pop_back();
  }
};

static std::string join_repr(const List& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i].repr();
  }
  return out;
}

static std::string dict_repr(const Dict& d) {
  std::string out = "{";
  for (std::size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    out += d.items[i].first.repr() + ": " + d.items[i].second.repr();
  }
  return out + "}";
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(f_);
    case Kind::String: return *s_;
    case Kind::List: {
      if (generator_) return "<generator object>";
      Printing guard(list_.get());
      return guard.again ? "[...]" : linnet::str("[", join_repr(*list_), "]");
    }
    case Kind::Tuple: return linnet::str("(", join_repr(*list_), list_->size() == 1 ? ",)" : ")");
    case Kind::Dict: {
      Printing guard(dict_.get());
      return guard.again ? "{...}" : dict_repr(*dict_);
    }
    case Kind::Namespace: {
      Printing guard(dict_.get());
      return linnet::str("<Namespace ", guard.again ? "{...}" : dict_repr(*dict_), ">");
    }
    case Kind::Function: return "<function " + fn_->name + ">";
  }
  return "";
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::String: return markup_ ? "Markup(" + pystr::repr(*s_) + ")" : pystr::repr(*s_);
    default: return str();
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "jinja2.runtime.Undefined object";
    case Kind::None: return "None";
    case Kind::Bool: return "bool object";
    case Kind::Int: return "int object";
    case Kind::Float: return "float object";
    case Kind::String: return markup_ ? "markupsafe.Markup object" : "str object";
    case Kind::List: return generator_ ? "generator object" : "list object";
    case Kind::Tuple: return "tuple object";
    case Kind::Dict: return "dict object";
    case Kind::Namespace: return "jinja2.utils.Namespace object";
    case Kind::Function: return "function object";
  }
  return "object";
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::Bool: return b_ == o.b_;
    case Kind::Int: return i_ == o.i_;  // CPython caches small ints; close enough
    case Kind::Float: return false;
    case Kind::String: return s_ == o.s_;
    case Kind::List: case Kind::Tuple: return list_ == o.list_;
    case Kind::Dict: case Kind::Namespace: return dict_ == o.dict_;
    case Kind::Function: return fn_ == o.fn_;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined: return !a.is_unsafe() && !b.is_unsafe();
    case K::None: return true;
    case K::String: return a.as_string() == b.as_string();
    case K::List: case K::Tuple: {
      if (a.is_generator() || b.is_generator()) return a.same_object(b);
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const Dict &x = a.dict_ref(), &y = b.dict_ref();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

static std::string python_type(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return "function";
  }
  return "object";
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.items(), &y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw EvalError("'<' not supported between instances of '" + python_type(a) + "' and '" + python_type(b) + "'");
}

const Value* Dict::find(const Value& key) const {
  for (const auto& item : items)
    if (equals(item.first, key)) return &item.second;
  return nullptr;
}

Value* Dict::find(const Value& key) {
  for (auto& item : items)
    if (equals(item.first, key)) return &item.second;
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  items.emplace_back(key, std::move(value));
}

}  // namespace linnet::jinja
