// What templates reach besides their own code: jinja2's filters and tests, Python's methods
// on str/dict/list, attribute and item access under the sandbox's rules, json.dumps.
// Everything here throws EvalError (the evaluator adds the line) or RaiseError.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "chat/jinja/jinja.h"
#include "chat/jinja/value.h"

namespace linnet::jinja {

struct Program;
std::shared_ptr<const Program> parse_program(std::string_view source, const Options& options);

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
bool apply_test(const std::string& name, const Value& input, CallArgs& args);

// obj.name: Python attribute first (methods), then obj[name]; undefined when neither.
Value get_attr(const Value& obj, const std::string& name);
// Python's getattr(obj, name) alone (the attr filter): nullopt when Python has no such attribute.
std::optional<Value> python_attr(const Value& obj, const std::string& name);
// obj[key]: the item first, then (for a string key) the attribute; undefined when neither.
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value call_value(const Value& callee, CallArgs& args);
// Python's iter(): a list's items, a dict's keys, a string's characters; undefined: nothing.
List iterate(const Value& v);
bool contains(const Value& container, const Value& item);  // Python `in`
std::int64_t py_len(const Value& v);

// Python's operators: + - * / // % ** ~ (binary_op), unary - + (unary_op), == != < <= > >=
// in, not in (compare_op).
Value binary_op(const std::string& op, const Value& a, const Value& b);
// Python's int(f): truncated toward zero; EvalError for NaN and infinity (as Python's
// ValueError and OverflowError) and past 64 bits (Python's int would be exact).
std::int64_t int_of_float(double f);
Value unary_op(const std::string& op, const Value& a);
bool compare_op(const std::string& op, const Value& a, const Value& b);

// Arguments matched to a Python signature: one slot per name, empty where not passed.
std::vector<std::optional<Value>> bind_args(const std::string& function, CallArgs& args,
                                            std::initializer_list<const char*> names);

struct JsonStyle {
  std::optional<std::string> indent;  // None, or the string each level indents by
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false, ensure_ascii = false;
};
// json.dumps(v, ...) as Python writes it; EvalError for what JSON cannot hold (undefined…).
std::string dumps(const Value& v, const JsonStyle& style);
// transformers' tojson filter: json.dumps(x, ensure_ascii=False, indent=…, separators=…, sort_keys=…).
Value tojson(const Value& v, CallArgs& args);

// "{} and {name}".format(...) (the sandbox's str.format: fields, no attribute lookups).
std::string format_string(const std::string& fmt, CallArgs& args);
// "%s %d" % args (printf-style).
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace linnet::jinja
