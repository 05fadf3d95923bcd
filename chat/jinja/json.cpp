// json.dumps as Python writes it (transformers' tojson filter), values from JSON, and
// transformers' strftime_now.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/pystr.h"

namespace linnet::jinja {
namespace {

void quote(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  auto plain = [](char b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; };
  for (std::size_t i = 0; i < s.size();) {
    if (plain(s[i])) {  // a run of ASCII written as it is, at once
      std::size_t j = i + 1;
      while (j < s.size() && plain(s[j])) ++j;
      out.append(s, i, j - i);
      i = j;
      continue;
    }
    const auto [c, n] = pystr::next_code_point(std::string_view(s).substr(i));
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)), unsigned(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          }
          out += buf;
        } else {
          out.append(s, i, n);  // as written
        }
    }
    i += n;
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

std::string python_type(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return "function";
    default: return v.type_name();
  }
}

// A dict key as json.dumps writes it (before quoting).
std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.as_string();
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return float_json(k.as_float());
    case Value::Kind::None: return "null";
    default: throw EvalError("keys must be str, int, float, bool or None, not " + python_type(k));
  }
}

void dump(std::string& out, const Value& v, const JsonStyle& style, int level) {
  RecursionGuard depth(" while encoding a JSON object");
  auto newline = [&](int lvl) {
    budget::check_text(out.size() + 1 + budget::product(std::size_t(lvl), style.indent->size()));
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *style.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += float_json(v.as_float()); return;
    case Value::Kind::String: quote(out, v.as_string(), style.ensure_ascii); return;
    case Value::Kind::List: case Value::Kind::Tuple: {
      if (v.is_generator()) throw EvalError("Object of type generator is not JSON serializable");
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indent) newline(level + 1);
        dump(out, items[i], style, level + 1);
        budget::check_text(out.size());
      }
      if (style.indent) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& item : v.dict_ref().items()) items.push_back(&item);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (style.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        if (style.indent) newline(level + 1);
        quote(out, key_string(items[i]->first), style.ensure_ascii);
        out += style.key_separator;
        dump(out, items[i]->second, style, level + 1);
        budget::check_text(out.size());
      }
      if (style.indent) newline(level);
      out += '}';
      return;
    }
    default:
      throw EvalError("Object of type " + python_type(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string dumps(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(out, v, style, 0);
  return out;
}

Value tojson(const Value& v, CallArgs& args) {
  auto a = bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_int()) {
      const auto width = std::size_t(std::max<std::int64_t>(0, a[1]->as_int()));
      budget::check_text(width);  // before making it
      style.indent = std::string(width, ' ');
    }
    else if (a[1]->is_string()) style.indent = a[1]->as_string();
    else throw EvalError("indent must be an int or a string, not " + a[1]->type_name());
    style.item_separator.assign(1, ',');
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_sequence() || a[2]->items().size() != 2 || !a[2]->items()[0].is_string() || !a[2]->items()[1].is_string())
      throw EvalError("separators must be a pair of strings");
    style.item_separator = a[2]->items()[0].as_string();
    style.key_separator = a[2]->items()[1].as_string();
  }
  style.sort_keys = a[3] && a[3]->truthy();
  return Value(dumps(v, style));
}

namespace {

// A JSON integer past int64 (up to 2**64 - 1): Python's would be exact, template integers are
// 64-bit (docs/chat_templates.md), so it is refused rather than wrapped.
Value unsigned_from_json(std::uint64_t u) {
  if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    throw EvalError(str("integer ", u, " is out of range: template integers are 64-bit"));
  return Value(std::int64_t(u));
}

[[gnu::noinline]] Value list_from_json(const nlohmann::ordered_json& j) {
  List items;
  items.reserve(j.size());
  for (const auto& x : j) items.push_back(from_json(x));
  return Value::list(std::move(items));
}

[[gnu::noinline]] Value dict_from_json(const nlohmann::ordered_json& j) {
  auto d = std::make_shared<Dict>();
  for (auto it = j.begin(); it != j.end(); ++it) d->set(Value(it.key()), from_json(it.value()));
  return Value::dict(std::move(d));
}

}  // namespace

// The containers are converted out of this frame, which is on the stack once per level.
Value from_json(const nlohmann::ordered_json& j) {
  RecursionGuard depth(" while converting JSON");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return unsigned_from_json(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: return list_from_json(j);
    case nlohmann::json::value_t::object: return dict_from_json(j);
    default: return Value::none();
  }
}

Value strftime_now_function(std::function<std::time_t()> now) {
  return Value::function("strftime_now", [now](CallArgs& args) {
    auto a = bind_args("strftime_now", args, {"format"});
    if (!a[0] || !a[0]->is_string()) throw EvalError("strftime_now() argument must be str");
    std::time_t t = now ? now() : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    // What datetime.strftime does before time.strftime: %f is the microseconds (the clock here
    // gives whole seconds), %z and %Z are empty for the naive datetime.now().
    std::string fmt;
    const std::string& given = a[0]->as_string();
    if (given.find('\0') != std::string::npos) throw EvalError("embedded null character");
    for (std::size_t i = 0; i < given.size(); ++i) {
      if (given[i] != '%' || i + 1 == given.size()) {
        fmt += given[i];
      } else if (given[i + 1] == 'f') {
        fmt += "000000", ++i;
      } else if (given[i + 1] == 'z' || given[i + 1] == 'Z') {
        ++i;
      } else {
        fmt.append(given, i, 2), ++i;
      }
    }
    // As Python's time.strftime: a larger buffer until the text fits, up to 256 bytes per byte
    // of format (past that, an empty text is taken to be the answer); the text a render may
    // make bounds it too.
    for (std::size_t size = std::max<std::size_t>(1024, 2 * fmt.size());; size *= 2) {
      budget::check_text(size / 2);
      std::string buf(size, '\0');
      const std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      if (n > 0 || size >= 256 * fmt.size()) return Value(buf.substr(0, n));
    }
  });
}

}  // namespace linnet::jinja
