// Runs a parsed template. Scoping follows what jinja2's compiled code does: every loop
// iteration, macro call, set block and call block gets a fresh scope over its parent (so a
// `set` inside a loop is gone after the iteration; namespaces carry state out), `if` shares
// its parent's; a macro sees the variables of the scope it was defined in, as they are when
// it is called.
#include <cmath>
#include <iterator>
#include <unordered_map>
#include <utility>

#include "chat/jinja/ast.h"
#include "chat/jinja/budget.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/jinja.h"

namespace linnet::jinja {
namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  // Searched in order while small (a loop iteration's scope holds two or three names); a
  // context with many thousand names is indexed by name past kIndexedFrom.
  std::vector<std::pair<std::string, Value>> vars;
  std::unordered_map<std::string, std::size_t> index;
  static constexpr std::size_t kIndexedFrom = 16;

  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}

  const Value* find(const std::string& name) const {
    if (index.empty()) {
      for (const auto& [k, v] : vars)
        if (k == name) return &v;
      return nullptr;
    }
    auto it = index.find(name);
    return it == index.end() ? nullptr : &vars[it->second].second;
  }
  Value* find(const std::string& name) { return const_cast<Value*>(std::as_const(*this).find(name)); }
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      if (const Value* v = s->find(name)) return v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    if (Value* found = find(name)) {
      *found = std::move(v);
      return;
    }
    vars.emplace_back(name, std::move(v));
    if (vars.size() == kIndexedFrom) {
      for (std::size_t i = 0; i < vars.size(); ++i) index.emplace(vars[i].first, i);
    } else if (vars.size() > kIndexedFrom) {
      index.emplace(name, vars.size() - 1);
    }
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

class Evaluator {
 public:
  int line = 0;

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    RecursionGuard depth;
    budget::steps();
    int outer = line;
    line = e.line;
    Value v = eval_node(e, scope);
    line = outer;
    return v;
  }

 private:
  // Output, measured before it grows (Limits::max_bytes) and charged as text built.
  static void emit(std::string& out, std::string_view text) {
    budget::built_text(out.size() + text.size(), text.size());
    out += text;
  }
  static void emit(std::string& out, const Value& v) {
    if (v.is_string()) emit(out, std::string_view(v.as_string()));
    else emit(out, std::string_view(v.str()));
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    RecursionGuard depth;
    budget::steps();
    line = s.line;
    switch (s.kind) {
      case Stmt::Kind::Text: emit(out, std::string_view(s.text)); return Flow::Normal;
      case Stmt::Kind::Print: exec_print(s, scope, out); return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Set: exec_set(s, scope); return Flow::Normal;
      case Stmt::Kind::SetBlock: exec_set_block(s, scope); return Flow::Normal;
      case Stmt::Kind::Macro: exec_macro(s, scope); return Flow::Normal;
      case Stmt::Kind::CallBlock: exec_call_block(s, scope, out); return Flow::Normal;
      case Stmt::Kind::FilterBlock: exec_filter_block(s, scope, out); return Flow::Normal;
      case Stmt::Kind::Scope: exec_scope(s, scope, out); return Flow::Normal;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // The statements' work, out of exec's frame (which is on the stack once per level).
  [[gnu::noinline]] void exec_print(const Stmt& s, const ScopePtr& scope, std::string& out) { emit(out, eval(*s.expr, scope)); }
  [[gnu::noinline]] void exec_set(const Stmt& s, const ScopePtr& scope) { assign(s.target, eval(*s.expr, scope), scope); }
  [[gnu::noinline]] void exec_macro(const Stmt& s, const ScopePtr& scope) { scope->set(s.macro->name, make_macro(s.macro, scope)); }
  [[gnu::noinline]] void exec_scope(const Stmt& s, const ScopePtr& scope, std::string& out) {
    emit(out, std::string_view(render_body(s.body, scope)));
  }

  [[gnu::noinline]] void exec_set_block(const Stmt& s, const ScopePtr& scope) {
    Value v(render_body(s.body, scope));
    assign(s.target, apply_filters(s.filters, v, scope), scope);
  }

  [[gnu::noinline]] void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const Expr& call = *s.expr;
    Value callee = eval(*call.a, scope);
    CallArgs args = eval_args(call.args, scope);
    args.keyword.emplace_back("caller", make_macro(s.macro, scope));
    line = s.line;
    emit(out, call_value(callee, args));
  }

  [[gnu::noinline]] void exec_filter_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
    Value v(render_body(s.body, scope));
    emit(out, apply_filters(s.filters, v, scope));
  }

  std::string render_body(const Body& body, const ScopePtr& scope) {
    std::string text;
    exec(body, std::make_shared<Scope>(scope), text);
    return text;
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
    for (const auto& f : filters) v = run_filter(*f, v, scope);
    return v;
  }

  Value run_filter(const Expr& f, const Value& input, const ScopePtr& scope) {
    CallArgs args = eval_args(f.args, scope);
    line = f.line;
    return apply_filter(f.name, input, args);
  }

  void bind(const Target& t, const Value& v, Scope& scope) {
    if (!t.unpack) {
      scope.set(t.names[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != t.names.size())
      throw EvalError(items.size() > t.names.size() ? str("too many values to unpack (expected ", t.names.size(), ")")
                                                    : str("not enough values to unpack (expected ", t.names.size(), ", got ", items.size(), ")"));
    for (std::size_t i = 0; i < items.size(); ++i) scope.set(t.names[i], items[i]);
  }

  void assign(const Target& t, const Value& v, const ScopePtr& scope) {
    if (t.attr.empty()) {
      bind(t, v, *scope);
      return;
    }
    const Value* ns = scope->lookup(t.names[0]);
    if (!ns || !ns->is_namespace()) throw EvalError("cannot assign attribute on non-namespace object");
    if (!t.attr.empty() && t.attr[0] == '_')
      throw EvalError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + t.attr + "'.");
    ns->dict_ref().set(Value(t.attr), v);
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    List items = iterate(eval(*s.expr, scope));
    if (s.cond) {
      List kept;
      for (const Value& item : items) {
        auto probe = std::make_shared<Scope>(scope);
        bind(s.target, item, *probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, std::make_shared<Scope>(scope), out);
      return Flow::Normal;
    }
    // One loop object for the whole loop, its fields set in place each iteration, as jinja2's
    // LoopContext is one object (making it anew was most of an iteration's time).
    const std::int64_t n = std::int64_t(items.size());
    auto at = std::make_shared<std::int64_t>(0);
    auto changed_last = std::make_shared<std::optional<List>>();
    auto loop = std::make_shared<Dict>();
    static const char* const kFields[] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                          "length", "depth", "depth0", "previtem", "nextitem"};
    for (const char* f : kFields) loop->set(Value(f), Value());
    loop->set(Value("cycle"), Value::function("cycle", [at](CallArgs& args) {
      if (args.positional.empty()) throw EvalError("no items for cycling given");
      return args.positional[std::size_t(*at) % args.positional.size()];
    }));
    loop->set(Value("changed"), Value::function("changed", [changed_last](CallArgs& args) {
      bool changed = !*changed_last || !equals(Value::list(**changed_last), Value::list(args.positional));
      *changed_last = args.positional;
      return Value(changed);
    }));
    Value* field[std::size(kFields)];  // the loop's dict takes no new keys: these stay valid
    for (std::size_t k = 0; k < std::size(kFields); ++k) field[k] = loop->find(Value(kFields[k]));
    *field[6] = Value(n);
    *field[7] = Value(1);
    *field[8] = Value(0);
    const Value no_previous = Value::undefined("there is no previous item"), no_next = Value::undefined("there is no next item");
    const Value loop_value = Value::dict(loop);
    for (std::int64_t i = 0; i < n; ++i) {
      budget::steps();
      *at = i;
      *field[0] = Value(i + 1);
      *field[1] = Value(i);
      *field[2] = Value(n - i);
      *field[3] = Value(n - i - 1);
      *field[4] = Value(i == 0);
      *field[5] = Value(i == n - 1);
      *field[9] = i > 0 ? items[std::size_t(i - 1)] : no_previous;
      *field[10] = i + 1 < n ? items[std::size_t(i + 1)] : no_next;
      auto iteration = std::make_shared<Scope>(scope);
      iteration->set("loop", loop_value);
      bind(s.target, items[std::size_t(i)], *iteration);
      if (exec(s.body, iteration, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // A macro holds its scope weakly: the scope usually holds the macro, and a strong
  // reference would make a cycle that outlives the render.
  Value make_macro(const std::shared_ptr<MacroDef>& def, const ScopePtr& defined_in) {
    std::weak_ptr<Scope> weak = defined_in;
    return Value::function(def->name, [this, def, weak](CallArgs& args) {
      ScopePtr scope = weak.lock();
      if (!scope) throw EvalError("macro '" + def->name + "' called after its scope ended");
      return call_macro(*def, scope, args);
    });
  }

  Value call_macro(const MacroDef& m, const ScopePtr& defined_in, CallArgs& args) {
    RecursionGuard depth;
    ScopePtr scope = macro_scope(m, defined_in, args);
    std::string text;
    int outer = line;
    exec(m.body, scope, text);
    line = outer;
    return Value(text);
  }

  // The scope a macro's body runs in: its parameters bound to the call's arguments.
  [[gnu::noinline]] ScopePtr macro_scope(const MacroDef& m, const ScopePtr& defined_in, CallArgs& args) {
    auto scope = std::make_shared<Scope>(defined_in);
    std::size_t count = m.params.size();
    auto keyword = args.keyword;
    std::vector<std::optional<Value>> given(count);
    for (std::size_t i = 0; i < count && i < args.positional.size(); ++i) given[i] = args.positional[i];
    if (args.positional.size() < count) {
      for (std::size_t i = args.positional.size(); i < count; ++i)
        for (auto it = keyword.begin(); it != keyword.end(); ++it)
          if (it->first == m.params[i].name) {
            given[i] = it->second;
            keyword.erase(it);
            break;
          }
    }
    Value caller = Value::undefined("No caller defined");
    for (auto it = keyword.begin(); it != keyword.end(); ++it)
      if (it->first == "caller" && m.uses_caller) {
        caller = it->second;
        keyword.erase(it);
        break;
      }
    if (!m.uses_kwargs && !keyword.empty())
      throw EvalError("macro '" + m.name + "' takes no keyword argument '" + keyword.front().first + "'");
    if (!m.uses_varargs && args.positional.size() > count)
      throw EvalError(str("macro '", m.name, "' takes not more than ", count, " argument(s)"));
    for (std::size_t i = 0; i < count; ++i) {
      const Param& p = m.params[i];
      if (given[i]) scope->set(p.name, *given[i]);
      else if (p.default_value) scope->set(p.name, eval(*p.default_value, scope));
      else scope->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
    }
    if (m.uses_caller) scope->set("caller", caller);
    if (m.uses_kwargs) {
      auto d = std::make_shared<Dict>();
      for (auto& [k, v] : keyword) d->set(Value(k), v);
      scope->set("kwargs", Value::dict(d));
    }
    if (m.uses_varargs)
      scope->set("varargs", Value::tuple(args.positional.size() > count ? List(args.positional.begin() + long(count), args.positional.end()) : List{}));
    return scope;
  }

  CallArgs eval_args(const Arguments& a, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& e : a.positional) args.positional.push_back(eval(*e, scope));
    for (const auto& [k, e] : a.keyword) args.keyword.emplace_back(k, eval(*e, scope));
    return args;
  }

  // The cases that need more than a value or two live in their own functions: eval_node's
  // frame is on the stack once per level of nesting (RecursionGuard), so it stays small.
  Value eval_node(const Expr& e, const ScopePtr& scope) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Const: return e.value;
      case K::Name: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        return undefined_name(e);
      }
      case K::List: case K::Tuple: return eval_sequence(e, scope);
      case K::Dict: return eval_dict(e, scope);
      case K::Getattr: {
        Value obj = eval(*e.a, scope);
        line = e.line;
        return get_attr(obj, e.name);
      }
      case K::Getitem: return eval_getitem(e, scope);
      case K::Slice: return eval_slice(e, scope);
      case K::Call: return eval_call(e, scope);
      case K::Filter: return eval_filter(e, scope);
      case K::Test: return eval_test(e, scope);
      case K::Not: return Value(!eval(*e.a, scope).truthy());
      case K::Neg: case K::Pos: return unary_op(e.kind == K::Neg ? "-" : "+", eval(*e.a, scope));
      case K::And: {
        Value l = eval(*e.a, scope);
        return l.truthy() ? eval(*e.b, scope) : l;
      }
      case K::Or: {
        Value l = eval(*e.a, scope);
        return l.truthy() ? l : eval(*e.b, scope);
      }
      case K::Binary: return eval_binary(e, scope);
      case K::Compare: return eval_compare(e, scope);
      case K::CondExpr: {
        if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return undefined_else(e);
      }
    }
    return Value();
  }

  [[gnu::noinline]] static Value undefined_name(const Expr& e) { return Value::undefined("'" + e.name + "' is undefined"); }

  [[gnu::noinline]] static Value undefined_else(const Expr& e) {
    return Value::undefined(str("the inline if-expression on line ", e.line, " evaluated to false and no else section was defined."));
  }

  [[gnu::noinline]] Value eval_filter(const Expr& e, const ScopePtr& scope) {
    Value input = eval(*e.a, scope);
    return run_filter(e, input, scope);
  }

  [[gnu::noinline]] Value eval_sequence(const Expr& e, const ScopePtr& scope) {
    List items;
    for (const auto& x : e.items) items.push_back(eval(*x, scope));
    return e.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }

  [[gnu::noinline]] Value eval_dict(const Expr& e, const ScopePtr& scope) {
    auto d = std::make_shared<Dict>();
    for (std::size_t i = 0; i + 1 < e.items.size(); i += 2) {
      Value k = eval(*e.items[i], scope);
      d->set(k, eval(*e.items[i + 1], scope));
    }
    return Value::dict(d);
  }

  [[gnu::noinline]] Value eval_getitem(const Expr& e, const ScopePtr& scope) {
    Value obj = eval(*e.a, scope);
    Value key = eval(*e.b, scope);
    line = e.line;
    return get_item(obj, key);
  }

  [[gnu::noinline]] Value eval_slice(const Expr& e, const ScopePtr& scope) {
    // The parser gives every slice its object (a slice inside a tuple subscript becomes
    // None there); should one ever come without, it is an error, never a null read.
    line = e.line;
    if (!e.a) throw EvalError("a slice without the value it slices");
    Value obj = eval(*e.a, scope);
    auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
    Value b = part(e.b), c = part(e.c), d = part(e.d);
    line = e.line;
    return slice(obj, b, c, d);
  }

  [[gnu::noinline]] Value eval_call(const Expr& e, const ScopePtr& scope) {
    Value callee = eval(*e.a, scope);
    CallArgs args = eval_args(e.args, scope);
    line = e.line;
    return call_value(callee, args);
  }

  [[gnu::noinline]] Value eval_test(const Expr& e, const ScopePtr& scope) {
    Value input = eval(*e.a, scope);
    CallArgs args = eval_args(e.args, scope);
    line = e.line;
    return Value(apply_test(e.name, input, args) != e.negated);
  }

  [[gnu::noinline]] Value eval_binary(const Expr& e, const ScopePtr& scope) {
    Value l = eval(*e.a, scope);
    Value r = eval(*e.b, scope);
    line = e.line;
    return binary_op(e.name, l, r);
  }

  [[gnu::noinline]] Value eval_compare(const Expr& e, const ScopePtr& scope) {
    Value left = eval(*e.a, scope);
    for (const auto& [op, rhs] : e.ops) {
      Value right = eval(*rhs, scope);
      line = e.line;
      if (!compare_op(op, left, right)) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }
};

// dict(**kwargs), dict(mapping), dict(pairs): the `dict` transformers puts in the globals.
Value make_dict(CallArgs& args) {
  auto d = std::make_shared<Dict>();
  if (args.positional.size() > 1) throw EvalError("dict expected at most 1 argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      *d = src.dict_ref();
    } else {
      for (const Value& pair : iterate(src)) {
        List kv = iterate(pair);
        if (kv.size() != 2) throw EvalError("dictionary update sequence element has wrong length");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d->set(Value(k), v);
  return Value::dict(d);
}

Value range(CallArgs& args) {
  auto a = bind_args("range", args, {"start", "stop", "step"});
  auto num = [](const std::optional<Value>& v) {
    if (!v || !v->is_int()) throw EvalError("range() arguments must be integers");
    return v->as_int();
  };
  std::int64_t start = 0, stop, step = 1;
  if (!a[1]) {
    stop = num(a[0]);
  } else {
    start = num(a[0]);
    stop = num(a[1]);
    if (a[2]) step = num(a[2]);
  }
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  List out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= 100000) throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past the 64-bit range: past stop too
  }
  return Value::list(std::move(out));
}

Globals builtin_globals() {
  return {
      {"range", Value::function("range", range)},
      {"dict", Value::function("dict", make_dict)},
      {"namespace", Value::function("namespace", [](CallArgs& args) {
         Value d = make_dict(args);
         for (const auto& [k, v] : d.dict_ref().items())
           if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
             throw EvalError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got " + k.repr() + ". Please rename the attribute.");
         return Value::namespace_(std::make_shared<Dict>(d.dict_ref()));
       })},
      {"raise_exception", Value::function("raise_exception", [](CallArgs& args) -> Value {
         auto a = bind_args("raise_exception", args, {"message"});
         throw RaiseError(a[0] ? a[0]->str() : "");
       })},
      {"strftime_now", strftime_now_function()},
  };
}

}  // namespace

Template Template::parse(std::string_view source, const Options& options) {
  Template t;
  t.program_ = parse_program(source, options);
  return t;
}

std::string Template::render(const nlohmann::ordered_json& context, const Globals& globals, const Limits& limits) const {
  if (!context.is_null() && !context.is_object()) throw RenderError("the template context must be a JSON object");
  Variables variables;
  if (context.is_object()) {
    variables.reserve(context.size());
    try {
      for (auto it = context.begin(); it != context.end(); ++it) variables.emplace_back(it.key(), from_json(it.value()));
    } catch (const EvalError& e) {
      throw RenderError(str("the template context: ", e.what()));
    }
  }
  return render_values(variables, globals, limits);
}

std::string Template::render_values(const Variables& context, const Globals& globals, const Limits& limits) const {
  auto base = std::make_shared<Scope>();
  for (auto& [k, v] : builtin_globals()) base->set(k, v);
  for (auto& [k, v] : globals) base->set(k, v);
  auto top = std::make_shared<Scope>(base);
  top->vars.reserve(context.size());
  for (const auto& [k, v] : context) top->set(k, v);
  // The template's own top-level variables sit above its context, as jinja2's do.
  auto scope = std::make_shared<Scope>(top);
  Evaluator ev;
  std::string out;
  budget::Scope spending(limits);
  try {
    ev.exec(program_->body, scope, out);
  } catch (const EvalError& e) {
    throw RenderError(str("line ", ev.line, ": ", e.what()));
  }
  return out;
}

}  // namespace linnet::jinja
