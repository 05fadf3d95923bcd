// The grammar and precedence of jinja2's parser (parser.py), statement by statement.
#include <set>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace linnet::jinja {
namespace {

using T = Token::Type;

const std::set<std::string> kCompareOps = {"==", "!=", "<", "<=", ">", ">="};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Program run() {
    Program p;
    p.body = subparse({});
    if (!unknown_errors_.empty()) throw TemplateError(unknown_errors_.front());
    return p;
  }

 private:
  std::vector<Token> toks_;
  std::size_t i_ = 0;
  int loop_depth_ = 0;
  // jinja2 refuses an unknown filter or test when it compiles the template, except inside
  // an if statement or an inline if (a "soft" frame): there it fails only when run.
  bool soft_ = false;
  std::vector<std::string> unknown_errors_;
  // Names read inside the macro being parsed (for varargs, kwargs, caller).
  std::vector<std::set<std::string>*> macro_names_;

  const Token& cur() const { return toks_[i_]; }
  const Token& look(std::size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  const Token& next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::End: return "end of template";
      case T::BlockEnd: return "end of statement block";
      case T::VariableEnd: return "end of print statement";
      case T::BlockBegin: return "begin of statement block";
      case T::VariableBegin: return "begin of print statement";
      case T::String: return "string";
      case T::Integer: return "integer";
      case T::Float: return "float";
      case T::Data: return "template data";
      default: return t.text;
    }
  }

  [[noreturn]] void fail(const std::string& what) const { syntax_error(cur().line, cur().column, what); }
  [[noreturn]] void fail_at(const Token& t, const std::string& what) const { syntax_error(t.line, t.column, what); }

  bool is_op(const char* op) const { return cur().type == T::Operator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == T::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(str("expected token '", op, "', got '", describe(cur()), "'"));
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail(str("expected token 'name', got '", describe(cur()), "'"));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != T::BlockEnd) fail(str("expected token 'end of statement block', got '", describe(cur()), "'"));
    next();
  }

  ExprPtr node(Expr::Kind k, int line) { return std::make_unique<Expr>(k, line); }

  // ---- statements ----

  // Statements up to a block whose tag is one of `ends` (left unread: the caller reads it).
  Body subparse(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::End) {
        if (!ends.empty()) {
          std::string list;
          for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
          fail(str("Unexpected end of template. Jinja was looking for the following tags: ", list, "."));
        }
        return body;
      }
      if (t.type == T::Data) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Text, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == T::VariableBegin) {
        next();
        auto s = std::make_unique<Stmt>(Stmt::Kind::Print, t.line);
        s->expr = parse_tuple(true, {}, false);
        if (cur().type != T::VariableEnd) fail(str("expected token 'end of print statement', got '", describe(cur()), "'"));
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::BlockBegin) {
        next();
        if (cur().type == T::Name && ends.count(cur().text)) return body;
        if (auto s = statement()) body.push_back(std::move(s));
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  // Reads `{% end… %}` after a body; `name` is the tag just found.
  void end_tag() {
    next();
    expect_block_end();
  }

  StmtPtr statement() {
    const Token& t = cur();
    if (t.type != T::Name) fail("tag name expected");
    std::string tag = t.text;
    int line = t.line;
    if (tag == "if") return if_stmt(line);
    if (tag == "for") return for_stmt(line);
    if (tag == "set") return set_stmt(line);
    if (tag == "macro") return macro_stmt(line);
    if (tag == "call") return call_stmt(line);
    if (tag == "filter") return filter_stmt(line);
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body
      next();
      expect_block_end();
      bool was = soft_;
      soft_ = false;
      auto s = std::make_unique<Stmt>(Stmt::Kind::Scope, line);
      s->body = subparse({"endgeneration"});
      soft_ = was;
      end_tag();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(str("Encountered unknown tag '", tag, "'."));
      next();
      expect_block_end();
      return std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    static const std::set<std::string> known_ends = {"endif", "endfor", "endset", "endmacro", "endcall", "endfilter",
                                                     "endgeneration", "elif", "else", "endraw"};
    if (known_ends.count(tag)) fail(str("Encountered unknown tag '", tag, "'."));
    fail(str("Encountered unknown tag '", tag, "'."));
  }

  StmtPtr if_stmt(int line) {
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, line);
    bool was = soft_;
    soft_ = true;
    while (true) {
      ExprPtr cond = parse_tuple(false, {}, false);
      expect_block_end();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->else_body = subparse({"endif"});
        end_tag();
      } else {
        expect_block_end();
      }
      break;
    }
    soft_ = was;
    return s;
  }

  Target assign_target(bool with_namespace, const std::set<std::string>& extra_end) {
    Target t;
    if (with_namespace && cur().type == T::Name && look().type == T::Operator && look().text == ".") {
      t.names.push_back(next().text);
      next();
      t.attr = expect_name();
      return t;
    }
    bool paren = skip_op("(");
    while (true) {
      if (cur().type != T::Name) fail(str("expected token 'name', got '", describe(cur()), "'"));
      if (cur().text == "true" || cur().text == "false" || cur().text == "none" || cur().text == "True" ||
          cur().text == "False" || cur().text == "None")
        fail(str("Can't assign to ", cur().text));
      t.names.push_back(next().text);
      if (!is_op(",")) break;
      next();
      t.unpack = true;
      if ((cur().type == T::Name && extra_end.count(cur().text)) || is_op(")") || cur().type == T::BlockEnd) break;
    }
    if (paren) {
      expect_op(")");
      t.unpack = true;
    }
    return t;
  }

  StmtPtr for_stmt(int line) {
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, line);
    bool was = soft_;
    soft_ = false;
    s->target = assign_target(false, {"in"});
    if (!skip_name("in")) fail(str("expected token 'in', got '", describe(cur()), "'"));
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (skip_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end();
      s->else_body = subparse({"endfor"});
      end_tag();
    } else {
      expect_block_end();
    }
    soft_ = was;
    return s;
  }

  StmtPtr set_stmt(int line) {
    next();
    Target target = assign_target(true, {});
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, line);
    s->target = std::move(target);
    bool was = soft_;
    soft_ = false;
    while (skip_op("|")) s->filters.push_back(parse_filter(nullptr, line));
    expect_block_end();
    s->body = subparse({"endset"});
    end_tag();
    soft_ = was;
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    bool any_default = false;
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        any_default = true;
      } else if (any_default) {
        fail("non-default argument follows default argument");
      }
      m.params.push_back(std::move(p));
    }
    next();
  }

  // Parses a macro or caller body, noting whether it reads varargs, kwargs or caller.
  void macro_body(MacroDef& m, const char* end) {
    std::set<std::string> names;
    macro_names_.push_back(&names);
    bool was = soft_;
    soft_ = false;
    int depth = loop_depth_;
    loop_depth_ = 0;
    m.body = subparse({end});
    loop_depth_ = depth;
    soft_ = was;
    macro_names_.pop_back();
    end_tag();
    m.uses_varargs = names.count("varargs");
    m.uses_kwargs = names.count("kwargs");
    m.uses_caller = names.count("caller");
  }

  StmtPtr macro_stmt(int line) {
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, line);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    s->macro->line = line;
    parse_signature(*s->macro);
    expect_block_end();
    macro_body(*s->macro, "endmacro");
    return s;
  }

  StmtPtr call_stmt(int line) {
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, line);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    s->macro->line = line;
    if (is_op("(")) parse_signature(*s->macro);
    bool was = soft_;
    soft_ = false;
    s->expr = parse_expression(true);
    soft_ = was;
    if (s->expr->kind != Expr::Kind::Call) fail_at(cur(), "expected call");
    expect_block_end();
    macro_body(*s->macro, "endcall");
    return s;
  }

  StmtPtr filter_stmt(int line) {
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, line);
    bool was = soft_;
    soft_ = false;
    s->filters.push_back(parse_filter(nullptr, line));
    while (skip_op("|")) s->filters.push_back(parse_filter(nullptr, line));
    expect_block_end();
    s->body = subparse({"endfilter"});
    end_tag();
    soft_ = was;
    return s;
  }

  // ---- expressions ----

  bool tuple_end(const std::set<std::string>& extra_end) const {
    if (cur().type == T::VariableEnd || cur().type == T::BlockEnd || is_op(")")) return true;
    return cur().type == T::Name && extra_end.count(cur().text);
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::set<std::string>& extra_end, bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(str("Expected an expression, got '", describe(cur()), "'"));
    }
    auto t = node(Expr::Kind::Tuple, line);
    t->items = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    std::size_t known_before = unknown_errors_.size();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      unknown_errors_.resize(known_before);  // the whole inline if is a soft frame
      bool was = soft_;
      soft_ = true;
      auto c = node(Expr::Kind::CondExpr, line);
      c->a = parse_or();  // the test
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_condexpr();
      soft_ = was;
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      auto n = node(Expr::Kind::Or, line);
      n->a = std::move(e);
      n->b = parse_and();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      auto n = node(Expr::Kind::And, line);
      n->a = std::move(e);
      n->b = parse_not();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = next().line;
      auto n = node(Expr::Kind::Not, line);
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr e = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      if (cur().type == T::Operator && kCompareOps.count(cur().text)) {
        std::string op = next().text;
        ops.emplace_back(op, parse_math1());
      } else if (skip_name("in")) {
        ops.emplace_back("in", parse_math1());
      } else if (is_name("not") && look().type == T::Name && look().text == "in") {
        next();
        next();
        ops.emplace_back("not in", parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return e;
    auto n = node(Expr::Kind::Compare, line);
    n->a = std::move(e);
    n->ops = std::move(ops);
    return n;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto n = node(Expr::Kind::Binary, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      bool neg = next().text == "-";
      e = node(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line);
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == T::Name) {
      next();
      auto c = node(Expr::Kind::Const, t.line);
      if (t.text == "true" || t.text == "True") c->value = Value(true);
      else if (t.text == "false" || t.text == "False") c->value = Value(false);
      else if (t.text == "none" || t.text == "None") c->value = Value::none();
      else {
        for (auto* names : macro_names_) names->insert(t.text);
        auto n = node(Expr::Kind::Name, t.line);
        n->name = t.text;
        return n;
      }
      return c;
    }
    if (t.type == T::String) {
      std::string s;
      int line = t.line;
      while (cur().type == T::String) s += next().text;  // adjacent literals join, as in Python
      auto c = node(Expr::Kind::Const, line);
      c->value = Value(std::move(s));
      return c;
    }
    if (t.type == T::Integer || t.type == T::Float) {
      next();
      auto c = node(Expr::Kind::Const, t.line);
      c->value = t.type == T::Integer ? Value(t.integer) : Value(t.number);
      return c;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node(Expr::Kind::List, t.line);
      while (!is_op("]")) {
        if (!l->items.empty()) expect_op(",");
        if (is_op("]")) break;
        l->items.push_back(parse_expression(true));
      }
      next();
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = node(Expr::Kind::Dict, t.line);
      while (!is_op("}")) {
        if (!d->items.empty()) expect_op(",");
        if (is_op("}")) break;
        d->items.push_back(parse_expression(true));
        expect_op(":");
        d->items.push_back(parse_expression(true));
      }
      next();
      return d;
    }
    fail(str("unexpected '", describe(t), "'"));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        int line = next().line;
        e = parse_filter(std::move(e), line);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& a = next();
      if (a.type == T::Name) {
        auto n = node(Expr::Kind::Getattr, t.line);
        n->a = std::move(e);
        n->name = a.text;
        return n;
      }
      if (a.type != T::Integer) fail_at(a, "expected name or number");
      auto n = node(Expr::Kind::Getitem, t.line);
      n->a = std::move(e);
      n->b = node(Expr::Kind::Const, a.line);
      n->b->value = Value(a.integer);
      return n;
    }
    std::vector<ExprPtr> keys;
    while (!is_op("]")) {
      if (!keys.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      keys.push_back(parse_subscribed());
    }
    next();
    auto n = node(Expr::Kind::Getitem, t.line);
    n->a = std::move(e);
    if (keys.size() == 1) {
      if (keys[0]->kind == Expr::Kind::Slice) {
        keys[0]->a = std::move(n->a);
        return std::move(keys[0]);
      }
      n->b = std::move(keys[0]);
    } else {
      n->b = node(Expr::Kind::Tuple, t.line);
      n->b->items = std::move(keys);
    }
    return n;
  }

  // An index, or a slice (returned as a Slice whose object the caller fills in).
  ExprPtr parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto s = node(Expr::Kind::Slice, line);
    s->b = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->c = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) s->d = parse_expression(true);
    }
    return s;
  }

  void parse_args(Arguments& args) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == T::Name && look().type == T::Operator && look().text == "=") {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(key, parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail("Invalid argument syntax (positional after keyword)");
        args.positional.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr e) {
    auto n = node(Expr::Kind::Call, cur().line);
    n->a = std::move(e);
    parse_args(n->args);
    return n;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  void check_known(const Token& at, const std::string& name, bool filter, Expr& n) {
    if (filter ? has_filter(name) : has_test(name)) return;
    n.unknown = true;
    if (!soft_)
      unknown_errors_.push_back(str("line ", at.line, ", column ", at.column, ": No ", filter ? "filter" : "test", " named '", name, "'."));
  }

  ExprPtr parse_filter(ExprPtr input, int line) {
    const Token& at = cur();
    auto n = node(Expr::Kind::Filter, line);
    n->a = std::move(input);
    n->name = dotted_name();
    check_known(at, n->name, true, *n);
    if (is_op("(")) parse_args(n->args);
    return n;
  }

  ExprPtr parse_test(ExprPtr input) {
    int line = next().line;  // `is`
    auto n = node(Expr::Kind::Test, line);
    n->a = std::move(input);
    n->negated = skip_name("not");
    const Token& at = cur();
    n->name = dotted_name();
    check_known(at, n->name, false, *n);
    const Token& t = cur();
    if (is_op("(")) {
      parse_args(n->args);
    } else if ((t.type == T::Name || t.type == T::String || t.type == T::Integer || t.type == T::Float || is_op("[") ||
                is_op("{")) &&
               !(t.type == T::Name && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (t.type == T::Name && t.text == "is") fail("You cannot chain multiple tests with is");
      n->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return n;
  }
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view source, const Options& options) {
  return std::make_shared<Program>(Parser(tokenize(source, options)).run());
}

}  // namespace linnet::jinja
