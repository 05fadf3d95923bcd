// jinja2's statements: text, output, if, for, set, macro, call, filter, generation, loop controls.
#include "chat/jinja/parser.h"

#include "chat/jinja/builtins.h"

namespace linnet::jinja {


// Statements up to a block whose tag is one of `ends` (left unread: the caller reads it).
Body Parser::subparse(const std::set<std::string>& ends) {
  Nested guard(*this);
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
void Parser::end_tag() {
  next();
  expect_block_end();
}

StmtPtr Parser::statement() {
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

StmtPtr Parser::if_stmt(int line) {
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

Target Parser::assign_target(bool with_namespace, const std::set<std::string>& extra_end) {
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

StmtPtr Parser::for_stmt(int line) {
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

StmtPtr Parser::set_stmt(int line) {
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

void Parser::parse_signature(MacroDef& m) {
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
void Parser::macro_body(MacroDef& m, const char* end) {
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

StmtPtr Parser::macro_stmt(int line) {
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

StmtPtr Parser::call_stmt(int line) {
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

StmtPtr Parser::filter_stmt(int line) {
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

std::shared_ptr<const Program> parse_program(std::string_view source, const Options& options) {
  return std::make_shared<Program>(Parser(tokenize(source, options)).run());
}

}  // namespace linnet::jinja
