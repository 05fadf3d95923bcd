// jinja2's parser (parser.py): statements in parser.cpp, expressions in parse_expressions.cpp.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"

namespace linnet::jinja {

class Parser {
  using T = Token::Type;

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
  // Nesting of expressions and blocks, which this parser follows by recursion (a level of
  // parentheses is a dozen calls): past kMaxNesting the template is refused, as jinja2
  // refuses it (RecursionError: at about 70 parentheses, 100 nested ifs).
  int nesting_ = 0;
  static constexpr int kMaxNesting = 100;
  // Expression trees (chains such as 1 + 1 + … or x.a.a.…, which the parser builds in a loop)
  // are evaluated and freed by recursion: deeper than this is refused too (jinja2: at ~490).
  static constexpr int kMaxExprDepth = 500;
  struct Nested {
    Parser& p;
    explicit Nested(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) p.fail(str("the template nests deeper than ", kMaxNesting, " levels"));
    }
    ~Nested() { --p.nesting_; }
  };
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
  // Sets n's depth from its children's (set before): a syntax error past kMaxExprDepth.
  ExprPtr settle(ExprPtr n);


  // statements (parser.cpp)
  Body subparse(const std::set<std::string>& ends);
  void end_tag();
  StmtPtr statement();
  StmtPtr if_stmt(int line);
  Target assign_target(bool with_namespace, const std::set<std::string>& extra_end);
  StmtPtr for_stmt(int line);
  StmtPtr set_stmt(int line);
  void parse_signature(MacroDef& m);
  void macro_body(MacroDef& m, const char* end);
  StmtPtr macro_stmt(int line);
  StmtPtr call_stmt(int line);
  StmtPtr filter_stmt(int line);

  // expressions (parse_expressions.cpp)
  ExprPtr parse_expression(bool with_condexpr);
  bool tuple_end(const std::set<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool with_condexpr, const std::set<std::string>& extra_end, bool explicit_parens);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr e);
  ExprPtr parse_subscribed();
  void parse_args(Arguments& args);
  ExprPtr parse_call(ExprPtr e);
  std::string dotted_name();
  void check_known(const Token& at, const std::string& name, bool filter, Expr& n);
  ExprPtr parse_filter(ExprPtr input, int line);
  ExprPtr parse_test(ExprPtr input);
};

}  // namespace linnet::jinja
