// The values a template computes with, as Python sees them under jinja2: None, bool, int,
// float, str (UTF-8 bytes; lengths and indices count code points), list, tuple, dict (in
// insertion order), jinja2's Namespace, callables, and jinja2's Undefined. Lists, dicts and
// namespaces are shared by reference, as Python objects are.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace linnet::jinja {

class Value;
using List = std::vector<Value>;

// A dict keyed by Python equality (1, 1.0 and True are one key), in insertion order. Lookups
// take constant time past a few items (an index by hash_key beside the items, as Python's
// dicts), so a context or message with many keys costs linear time, not quadratic.
class Dict {
 public:
  Dict() = default;
  Dict(const Dict& other);  // counted in a render's budget (Limits::max_steps)
  Dict& operator=(const Dict& other);
  Dict(Dict&&) = default;
  Dict& operator=(Dict&&) = default;
  ~Dict();

  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  std::size_t size() const;  // (defined below Value: the items need it complete)
  bool empty() const;
  // nullptr when absent (also for an unhashable key, which no dict can hold).
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  // Replaces the value of an existing key in place, else appends; EvalError for an
  // unhashable key ("unhashable type: 'list'").
  void set(const Value& key, Value value);

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_multimap<std::size_t, std::size_t> index_;  // hash_key → position; empty while small
  std::ptrdiff_t position(const Value& key) const;
};

// What a callable receives: positional and keyword arguments as written at the call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

// Thrown by evaluation helpers; the evaluator adds the template line.
class EvalError : public linnet::Error {
 public:
  using linnet::Error::Error;
};

// How deep a thread's recursive work may go: evaluating nested expressions, statements and
// macro calls, printing, comparing, hashing, converting or dumping nested values each count a
// level, as Python counts every frame against its recursion limit (1000). Past it the work
// fails as jinja2's RecursionError does, with EvalError "maximum recursion depth exceeded…",
// long before the stack runs out: a level costs at most about half a KiB of stack (measured;
// tests/jinja_test.cpp runs the deepest nesting on a 1 MiB thread stack).
constexpr int kMaxRecursion = 1000;

// One level of that: throws past kMaxRecursion, `while_doing` completing the message as
// Python's does (" while getting the repr of an object", " in comparison").
class RecursionGuard {
 public:
  explicit RecursionGuard(const char* while_doing = "");
  ~RecursionGuard();
  RecursionGuard(const RecursionGuard&) = delete;
  RecursionGuard& operator=(const RecursionGuard&) = delete;
};

// A list's items, released one level at a time when it goes (a queue in value.cpp; Dict's
// destructor does the same): a list nested 100,000 deep, which a template can build, must
// not recurse that deep in destructors.
struct ListBox {
  List items;
  ~ListBox();
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  // jinja2's sandbox hands out this undefined for unsafe attributes (list.append): using it
  // raises SecurityError.
  static Value unsafe(std::string message);
  static Value none();
  Value(bool b);
  Value(int i) : Value(std::int64_t(i)) {}
  Value(std::int64_t i);
  Value(double f);
  Value(std::string s, bool markup = false);  // in a render, measured against its Limits (budget.h)
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items = {});
  static Value tuple(List items);
  // What jinja2's map, select, reverse… return: a Python generator. It iterates like a
  // list, but has no len(), no items by index, is always true, and prints as an object.
  static Value generator(List items);
  static Value dict(std::shared_ptr<Dict> d = nullptr);
  static Value namespace_(std::shared_ptr<Dict> attrs);
  static Value function(std::string name, std::function<Value(CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python: bool is an int
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Function; }
  bool is_generator() const { return kind_ == Kind::List && generator_; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_unsafe() const { return kind_ == Kind::Undefined && unsafe_; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return kind_ == Kind::Bool ? std::int64_t(b_) : i_; }
  double as_float() const { return kind_ == Kind::Float ? f_ : double(as_int()); }
  const std::string& as_string() const { return *s_; }
  List& items() const { return list_->items; }  // list or tuple
  Dict& dict_ref() const { return *dict_; }  // dict or namespace
  const Function& function_ref() const { return *fn_; }
  const std::string& undefined_hint() const { return *s_; }

  // Raises the undefined's error ("'x' is undefined") when a use needs a real value.
  [[noreturn]] void fail_undefined() const;

  // Python's truth value; str() (what {{ }} prints); repr().
  bool truthy() const;
  std::string str() const;
  std::string repr() const;
  // "dict object", "str object": jinja2's names in error messages.
  std::string type_name() const;

  bool same_object(const Value& other) const;  // Python `is`

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool markup_ = false;
  bool unsafe_ = false;
  bool generator_ = false;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<ListBox> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

inline std::size_t Dict::size() const { return items_.size(); }
inline bool Dict::empty() const { return items_.empty(); }

// Python ==, and < for sorting and comparisons (EvalError when Python would raise TypeError).
// An int and a float compare exactly, as Python's do (2**53 + 1 != 2.0**53).
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);

// Python's hash() as far as dicts need it: equal values hash alike (1, 1.0, True). Python
// refuses lists, dicts and tuples holding them as keys: hashable() says which.
bool hashable(const Value& v);
void require_hashable(const Value& v);  // EvalError "unhashable type: 'list'" as Python's TypeError
std::size_t hash_key(const Value& v);

// The value's Python type as Python's messages name it: "int", "float", "str", "list"…
std::string python_type_name(const Value& v);

// Python's repr of a float ("1.0", "1e+20", "0.30000000000000004").
std::string float_repr(double f);

}  // namespace linnet::jinja
