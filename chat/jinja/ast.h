// The parsed template: expressions and statements, each with the line it starts on.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace linnet::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    Const, Name, List, Tuple, Dict, Getattr, Getitem, Slice, Call, Filter, Test,
    Not, Neg, Pos, Binary, And, Or, Compare, CondExpr
  };
  Kind kind;
  int line = 0;
  Value value;                      // Const
  std::string name;                 // Name, Getattr's attribute, Filter/Test's name, Binary's operator
  std::vector<ExprPtr> items;       // List, Tuple; Dict as key, value, key, value…
  ExprPtr a, b, c, d;               // operands: object/key, slice start/stop/step, cond parts
  Arguments args;                   // Call, Filter, Test
  std::vector<std::pair<std::string, ExprPtr>> ops;  // Compare: operator and right side
  bool negated = false;             // Test: `is not`
  bool unknown = false;             // Filter/Test: not known when parsed (an if branch): fails if run
  int depth = 1;                    // levels of the tree under and with this node (Parser::settle)

  Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// What `set` and `for` assign to: names (several: tuple unpacking), or namespace.attr.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;  // written as a tuple (`for k, v in …`, `set a, b = …`)
  std::string attr;     // set ns.attr: names[0] is the namespace
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null when none
};

// The body of a macro or a call block's caller, shared with the values made from it.
struct MacroDef {
  std::string name;
  std::vector<Param> params;
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  int line = 0;
};

struct Stmt {
  enum class Kind { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Scope };
  Kind kind;
  int line = 0;
  std::string text;                                // Text
  ExprPtr expr;                                    // Print, Set's value, For's iterable, CallBlock's call
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition and body, in order (elif…)
  Body body, else_body;                            // For, SetBlock, FilterBlock, Scope (generation); else
  Target target;                                   // For, Set, SetBlock
  ExprPtr cond;                                    // For's `if` filter
  std::vector<ExprPtr> filters;                    // SetBlock, FilterBlock: Filter exprs with no input
  std::shared_ptr<MacroDef> macro;                 // Macro, CallBlock (the caller)

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

struct Program {
  Body body;
};

}  // namespace linnet::jinja
