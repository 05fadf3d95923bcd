#include "chat/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "chat/jinja/budget.h"
#include "chat/jinja/pystr.h"

namespace linnet::jinja {

namespace {

// Values whose containers are being released: a thread's queue, emptied by the outermost
// release one value at a time, so that releasing lists nested 100,000 deep is a loop, not a
// recursion that deep.
// A value released after the thread's queue is gone (a static one, at exit) is released the
// plain way: queue_gone has no destructor, so it can still be read then.
thread_local bool queue_gone = false;
struct ReleaseQueue {
  std::vector<Value> values;
  bool draining = false;
  ~ReleaseQueue() { queue_gone = true; }
};
thread_local ReleaseQueue releasing;

void queue_release(Value& v) {
  if (!queue_gone && (v.is_sequence() || v.is_dict() || v.is_namespace())) releasing.values.push_back(std::move(v));
}

void drain_releases() {
  if (queue_gone || releasing.draining) return;  // an outer release empties the queue
  releasing.draining = true;
  while (!releasing.values.empty()) {
    Value last = std::move(releasing.values.back());
    releasing.values.pop_back();
  }  // `last` going may queue its own items, which the loop takes next
  releasing.draining = false;
}

}  // namespace

thread_local int recursion_depth = 0;

RecursionGuard::RecursionGuard(const char* while_doing) {
  if (recursion_depth >= kMaxRecursion) throw EvalError(std::string("maximum recursion depth exceeded") + while_doing);
  ++recursion_depth;
}

RecursionGuard::~RecursionGuard() { --recursion_depth; }

Dict::Dict(const Dict& other) : items_(other.items_), index_(other.index_) {
  budget::built(items_.size() * sizeof(items_[0]));  // dict(d), d.copy(), namespace(d): a copy made
}

Dict& Dict::operator=(const Dict& other) {
  items_ = other.items_;
  index_ = other.index_;
  budget::built(items_.size() * sizeof(items_[0]));
  return *this;
}

ListBox::~ListBox() {
  for (Value& v : items) queue_release(v);
  drain_releases();
}

Dict::~Dict() {
  for (auto& [k, v] : items_) {
    queue_release(k);
    queue_release(v);
  }
  drain_releases();
}

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
    : kind_(Kind::String), markup_(markup), s_(std::make_shared<std::string>(std::move(s))) {
  budget::built_text(s_->size());  // in a render: every string the template makes is measured
}

Value Value::list(List items) {
  budget::check_items(items.size());
  budget::built(items.size() * sizeof(Value));
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<ListBox>();
  v.list_->items = std::move(items);
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
    case Kind::List: case Kind::Tuple: return generator_ || !list_->items.empty();
    case Kind::Dict: return !dict_->empty();
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

namespace {

void append_str(std::string& out, const Value& v);

void append_repr(std::string& out, const Value& v) {
  if (v.is_string()) {
    out += v.is_markup() ? "Markup(" + pystr::repr(v.as_string()) + ")" : pystr::repr(v.as_string());
    budget::check_text(out.size());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_str(out, v);
  }
}

void append_items(std::string& out, const List& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i]);
  }
}

void append_dict(std::string& out, const Dict& d) {
  out += '{';
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, d.items()[i].first);
    out += ": ";
    append_repr(out, d.items()[i].second);
  }
  out += '}';
}

// str(v) appended to out: one frame per level of nesting, and the text measured as it grows
// (a list of many references to one long string prints to far more than it holds).
void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List: case Value::Kind::Tuple: case Value::Kind::Dict: case Value::Kind::Namespace: break;
    case Value::Kind::String: out += v.as_string(); budget::check_text(out.size()); return;
    default: out += v.str(); return;
  }
  if (v.is_generator()) {
    out += "<generator object>";
    return;
  }
  RecursionGuard depth(" while getting the repr of an object");
  if (v.is_tuple()) {
    out += '(';
    append_items(out, v.items());
    out += v.items().size() == 1 ? ",)" : ")";
  } else if (v.is_list()) {
    Printing guard(&v.items());
    if (guard.again) {
      out += "[...]";
    } else {
      out += '[';
      append_items(out, v.items());
      out += ']';
    }
  } else {
    Printing guard(&v.dict_ref());
    if (v.is_namespace()) out += "<Namespace ";
    if (guard.again) out += "{...}";
    else append_dict(out, v.dict_ref());
    if (v.is_namespace()) out += '>';
  }
  budget::check_text(out.size());
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(f_);
    case Kind::String: return *s_;
    case Kind::Function: return "<function " + fn_->name + ">";
    default: {
      std::string out;
      append_str(out, *this);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  append_repr(out, *this);
  return out;
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

namespace {

// An int against a float, exactly (Python compares the values, not the int made a float):
// -1, 0 or 1 for i <, ==, > f; nullopt when f is NaN.
std::optional<int> compare_int_float(std::int64_t i, double f) {
  if (std::isnan(f)) return std::nullopt;
  constexpr double kTwo63 = 9223372036854775808.0;
  if (f >= kTwo63) return -1;
  if (f < -kTwo63) return 1;
  const double whole = std::trunc(f);  // in [-2**63, 2**63): exact as an int64
  const auto w = static_cast<std::int64_t>(whole);
  if (i != w) return i < w ? -1 : 1;
  if (f == whole) return 0;
  return f > whole ? -1 : 1;
}

// <0, 0, >0 for numbers a and b; nullopt when either is NaN.
std::optional<int> compare_numbers(const Value& a, const Value& b) {
  if (a.is_float() && b.is_float()) {
    const double x = a.as_float(), y = b.as_float();
    if (std::isnan(x) || std::isnan(y)) return std::nullopt;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_float()) {
    auto c = compare_int_float(b.as_int(), a.as_float());
    return c ? std::optional<int>(-*c) : std::nullopt;
  }
  if (b.is_float()) return compare_int_float(a.as_int(), b.as_float());
  return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  if ((a.is_sequence() || a.is_dict()) && a.same_object(b)) return true;  // Python's identity shortcut
  RecursionGuard depth(" in comparison");
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
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

std::string python_type_name(const Value& v) {
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
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) < 0;
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.kind() == b.kind() && a.is_sequence()) {
    RecursionGuard depth(" in comparison");
    const List &x = a.items(), &y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw EvalError("'<' not supported between instances of '" + python_type_name(a) + "' and '" + python_type_name(b) + "'");
}

bool hashable(const Value& v) {
  RecursionGuard depth;
  if (v.is_tuple()) return std::all_of(v.items().begin(), v.items().end(), [](const Value& x) { return hashable(x); });
  return !(v.is_list() && !v.is_generator()) && !v.is_dict();
}

void require_hashable(const Value& v) {
  if (hashable(v)) return;
  const Value* part = &v;  // Python names the first unhashable item of a tuple
  while (part->is_tuple()) part = &*std::find_if(part->items().begin(), part->items().end(), [](const Value& x) { return !hashable(x); });
  throw EvalError("unhashable type: '" + python_type_name(*part) + "'");
}

std::size_t hash_key(const Value& v) {
  auto mix = [](std::size_t h, std::size_t x) { return h ^ (x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); };
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0x51;  // every undefined equals every other (but unsafe ones)
    case Value::Kind::None: return 0x4e;
    case Value::Kind::Bool: case Value::Kind::Int: return std::hash<std::int64_t>()(v.as_int());
    case Value::Kind::Float: {
      // A float equal to an int hashes as that int (1.0 and 1 are one key).
      const double f = v.as_float();
      if (f == std::trunc(f) && f >= -9223372036854775808.0 && f < 9223372036854775808.0)
        return std::hash<std::int64_t>()(static_cast<std::int64_t>(f));
      return std::hash<double>()(f);
    }
    case Value::Kind::String: return std::hash<std::string>()(v.as_string());
    case Value::Kind::List: case Value::Kind::Tuple: {
      if (v.is_generator()) return std::hash<const void*>()(&v.items());
      RecursionGuard depth;
      std::size_t h = v.items().size();
      for (const Value& x : v.items()) h = mix(h, hash_key(x));
      return h;
    }
    case Value::Kind::Dict: return 0x44;  // unhashable: never a key
    case Value::Kind::Namespace: return std::hash<const void*>()(&v.dict_ref());
    case Value::Kind::Function: return std::hash<const void*>()(&v.function_ref());
  }
  return 0;
}

namespace {
constexpr std::size_t kIndexedFrom = 8;  // smaller dicts are searched in order: cheaper than hashing
}

std::ptrdiff_t Dict::position(const Value& key) const {
  if (index_.empty()) {
    for (std::size_t i = 0; i < items_.size(); ++i)
      if (equals(items_[i].first, key)) return std::ptrdiff_t(i);
    return -1;
  }
  if (!hashable(key)) return -1;
  auto [from, to] = index_.equal_range(hash_key(key));
  for (auto it = from; it != to; ++it)
    if (equals(items_[it->second].first, key)) return std::ptrdiff_t(it->second);
  return -1;
}

const Value* Dict::find(const Value& key) const {
  const std::ptrdiff_t at = position(key);
  return at < 0 ? nullptr : &items_[std::size_t(at)].second;
}

Value* Dict::find(const Value& key) {
  const std::ptrdiff_t at = position(key);
  return at < 0 ? nullptr : &items_[std::size_t(at)].second;
}

void Dict::set(const Value& key, Value value) {
  require_hashable(key);
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  items_.emplace_back(key, std::move(value));
  if (items_.size() == kIndexedFrom) {
    index_.reserve(2 * kIndexedFrom);
    for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(hash_key(items_[i].first), i);
  } else if (items_.size() > kIndexedFrom) {
    index_.emplace(hash_key(key), items_.size() - 1);
  }
}

}  // namespace linnet::jinja
