// jinja2's expressions, by precedence: inline if, or, and, not, comparisons, + -, ~, * / // %,
// **, unary - +, then filters, tests, calls, attributes and subscripts on a primary.
#include "chat/jinja/builtins.h"
#include "chat/jinja/parser.h"

namespace linnet::jinja {

static const std::set<std::string> kCompareOps = {"==", "!=", "<", "<=", ">", ">="};


ExprPtr Parser::settle(ExprPtr n) {
  int below = 0;
  auto see = [&](const ExprPtr& child) {
    if (child) below = std::max(below, child->depth);
  };
  for (const ExprPtr* child : {&n->a, &n->b, &n->c, &n->d}) see(*child);
  for (const auto& x : n->items) see(x);
  for (const auto& x : n->args.positional) see(x);
  for (const auto& [name, x] : n->args.keyword) see(x);
  for (const auto& [op, x] : n->ops) see(x);
  n->depth = below + 1;
  if (n->depth > kMaxExprDepth) fail(str("the expression nests deeper than ", kMaxExprDepth, " levels"));
  return n;
}

bool Parser::tuple_end(const std::set<std::string>& extra_end) const {
  if (cur().type == T::VariableEnd || cur().type == T::BlockEnd || is_op(")")) return true;
  return cur().type == T::Name && extra_end.count(cur().text);
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const std::set<std::string>& extra_end, bool explicit_parens) {
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
  return settle(std::move(t));
}

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
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
    if (skip_name("else")) {
      Nested guard(*this);
      c->c = parse_condexpr();
    }
    soft_ = was;
    e = settle(std::move(c));
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    int line = next().line;
    auto n = node(Expr::Kind::Or, line);
    n->a = std::move(e);
    n->b = parse_and();
    e = settle(std::move(n));
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    int line = next().line;
    auto n = node(Expr::Kind::And, line);
    n->a = std::move(e);
    n->b = parse_not();
    e = settle(std::move(n));
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    Nested guard(*this);
    int line = next().line;
    auto n = node(Expr::Kind::Not, line);
    n->a = parse_not();
    return settle(std::move(n));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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
  return settle(std::move(n));
}

ExprPtr Parser::binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
  auto n = node(Expr::Kind::Binary, line);
  n->name = op;
  n->a = std::move(l);
  n->b = std::move(r);
  return settle(std::move(n));
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    e = binary(t.text, std::move(e), parse_concat(), t.line);
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_math2();
  while (is_op("~")) {
    int line = next().line;
    e = binary("~", std::move(e), parse_math2(), line);
  }
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    e = binary(t.text, std::move(e), parse_pow(), t.line);
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op("**")) {
    int line = next().line;
    e = binary("**", std::move(e), parse_unary(true), line);
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nested guard(*this);
  int line = cur().line;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    bool neg = next().text == "-";
    e = node(neg ? Expr::Kind::Neg : Expr::Kind::Pos, line);
    e->a = parse_unary(false);
    e = settle(std::move(e));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
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
    return settle(std::move(l));
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
    return settle(std::move(d));
  }
  fail(str("unexpected '", describe(t), "'"));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
    else if (is_op("(")) e = parse_call(std::move(e));
    else return e;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
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

ExprPtr Parser::parse_subscript(ExprPtr e) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& a = next();
    if (a.type == T::Name) {
      auto n = node(Expr::Kind::Getattr, t.line);
      n->a = std::move(e);
      n->name = a.text;
      return settle(std::move(n));
    }
    if (a.type != T::Integer) fail_at(a, "expected name or number");
    auto n = node(Expr::Kind::Getitem, t.line);
    n->a = std::move(e);
    n->b = node(Expr::Kind::Const, a.line);
    n->b->value = Value(a.integer);
    return settle(std::move(n));
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
      return settle(std::move(keys[0]));
    }
    n->b = std::move(keys[0]);
  } else {
    // x[a:b, c]: the key is a tuple holding a slice object, which no value here can be (a list
    // or string refuses it, a dict cannot hold it: jinja2 gives undefined either way). A slice
    // among the keys stands as None, which leads the lookup to the same undefined.
    for (auto& k : keys)
      if (k->kind == Expr::Kind::Slice) {
        const int at = k->line;
        k = node(Expr::Kind::Const, at);
        k->value = Value::none();
      }
    n->b = node(Expr::Kind::Tuple, t.line);
    n->b->items = std::move(keys);
    n->b = settle(std::move(n->b));
  }
  return settle(std::move(n));
}

// An index, or a slice (returned as a Slice whose object the caller fills in).
ExprPtr Parser::parse_subscribed() {
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
  return settle(std::move(s));
}

void Parser::parse_args(Arguments& args) {
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

ExprPtr Parser::parse_call(ExprPtr e) {
  auto n = node(Expr::Kind::Call, cur().line);
  n->a = std::move(e);
  parse_args(n->args);
  return settle(std::move(n));
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += '.';
    name += expect_name();
  }
  return name;
}

void Parser::check_known(const Token& at, const std::string& name, bool filter, Expr& n) {
  if (filter ? has_filter(name) : has_test(name)) return;
  n.unknown = true;
  if (!soft_)
    unknown_errors_.push_back(str("line ", at.line, ", column ", at.column, ": No ", filter ? "filter" : "test", " named '", name, "'."));
}

ExprPtr Parser::parse_filter(ExprPtr input, int line) {
  const Token& at = cur();
  auto n = node(Expr::Kind::Filter, line);
  n->a = std::move(input);
  n->name = dotted_name();
  check_known(at, n->name, true, *n);
  if (is_op("(")) parse_args(n->args);
  return settle(std::move(n));
}

ExprPtr Parser::parse_test(ExprPtr input) {
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
  return settle(std::move(n));
}
}  // namespace linnet::jinja
