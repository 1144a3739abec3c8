// The syntax of the chat-template renderer (tasks/serve/chat_template.h): a template cut into
// text and tags with transformers' whitespace control, and parsed into statements (Node) and
// expressions (Expr).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tasks/serve/chat_template_value.h"

namespace megatron::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kNot,
    kIf
  } kind;
  Value literal;
  std::string name;           // names, attributes, operators, filters, tests
  std::vector<ExprPtr> args;  // operands / call arguments (positional)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // `is not`, `not in`
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue } kind;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kSet's value, kFor's iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body); else: null cond
  std::vector<std::string> targets;                // kFor's names; kSet: name [, attribute]
  ExprPtr filter;                                  // kFor's `if`
  Body body, else_body;                            // kFor
};

// The template's statements; throws Error naming what is outside the subset.
Body parse_template(const std::string& source);

}  // namespace megatron::jinja
