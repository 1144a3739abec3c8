#include "tasks/serve/chat_template.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/error.h"

namespace megatron {

namespace {

// Values are JSON values that keep their keys' order (Python dicts do); "undefined" (a name
// that is not set) is the discarded value.
using Value = nlohmann::ordered_json;
const Value kUndefined = Value(Value::value_t::discarded);

bool is_undefined(const Value& v) {
  return v.is_discarded();
}

bool truthy(const Value& v) {
  if (is_undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

// Python's repr of a float: the shortest text that reads back the same, with ".0" for integers.
std::string float_text(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  std::string s = Value(d).dump();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string repr(const Value& v);

// Python's str() of a value, as {{ }} prints it.
std::string text_of(const Value& v) {
  if (is_undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return float_text(v.get<double>());
  return repr(v);
}

std::string repr(const Value& v) {
  if (v.is_string()) {
    std::string s = "'";
    for (char c : v.get<std::string>()) {
      if (c == '\'' || c == '\\') s += '\\';
      if (c == '\n') {
        s += "\\n";
        continue;
      }
      s += c;
    }
    return s + "'";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + repr(v[i]);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false)
      s += (first ? "" : ", ") + repr(Value(it.key())) + ": " + repr(it.value());
    return s + "}";
  }
  return text_of(v);
}

[[noreturn]] void fail(const std::string& what) {
  MT_THROW("chat template: ", what);
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent): ", " and ": " between items
// without an indent, "," and newlines with one. Recursion is bounded by the request's JSON
// depth (tasks/serve/json_body.h).
std::string python_json(const Value& v, int indent, int level) {
  if (v.is_number_float()) return float_text(v.get<double>());
  if (!v.is_array() && !v.is_object())
    return v.dump(-1, ' ', false, Value::error_handler_t::replace);
  if (v.empty()) return v.is_array() ? "[]" : "{}";
  // A newline and the next level's indent (indent ≥ 0 only).
  const auto newline = [&](int depth) {
    std::string line(1, '\n');
    line.append(size_t(std::max(indent * depth, 0)), ' ');
    return line;
  };
  const std::string pad = indent < 0 ? std::string() : newline(level + 1);
  const std::string sep = indent < 0 ? ", " : ",";
  std::string s(1, v.is_array() ? '[' : '{');
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false) {
    s += (first ? "" : sep) + pad;
    if (v.is_object())
      s += Value(it.key()).dump(-1, ' ', false, Value::error_handler_t::replace) + ": ";
    s += python_json(it.value(), indent, level + 1);
  }
  if (indent >= 0) s += newline(level);
  return s + (v.is_array() ? ']' : '}');
}

// ---- lexer ------------------------------------------------------------------------------------

enum class Tok { kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  std::string text;
};

// Splits the inside of a tag into tokens.
std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) ||
                              (s[j] == '.' && !is_float && j + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        is_float = is_float || s[j] == '.';
        ++j;
      }
      out.push_back({is_float ? Tok::kFloat : Tok::kInt, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string value;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 == s.size()) {
          value += s[j];
          continue;
        }
        const char e = s[++j];
        value += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (j >= s.size()) fail("a string literal is not closed");
      out.push_back({Tok::kString, value});
      i = j + 1;
    } else {
      static const char* const kOps[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[",
                                         "]",  "{",  "}",  ",",  ".",  ":",  "|", "+", "-",
                                         "*",  "/",  "%",  "~",  "<",  ">",  "="};
      bool matched = false;
      for (const char* op : kOps)
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Tok::kOp, op});
          i += std::strlen(op);
          matched = true;
          break;
        }
      if (!matched) fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

// ---- expressions ------------------------------------------------------------------------------

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

ExprPtr make(Expr::Kind kind, std::string name = "") {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->name = std::move(name);
  return e;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  ExprPtr parse_expression() {  // a if c else b
    ExprPtr value = parse_or();
    while (is_name("if")) {
      ++p_;
      ExprPtr cond = parse_or();
      ExprPtr other = make(Expr::kLiteral);
      other->literal = kUndefined;
      if (is_name("else")) {
        ++p_;
        other = parse_expression();
      }
      ExprPtr e = make(Expr::kIf);
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(other));
      value = std::move(e);
    }
    return value;
  }
  bool is_name(const char* n) const { return t_[p_].kind == Tok::kName && t_[p_].text == n; }
  bool is_op(const char* op) const { return t_[p_].kind == Tok::kOp && t_[p_].text == op; }
  bool at_end() const { return t_[p_].kind == Tok::kEnd; }
  const Token& peek() const { return t_[p_]; }
  std::string take_name() {
    if (t_[p_].kind != Tok::kName) fail("expected a name, found '" + t_[p_].text + "'");
    return t_[p_++].text;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', found '" + t_[p_].text + "'");
    ++p_;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + t_[p_].text + "'");
  }

 private:
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, Expr::Kind kind = Expr::kBinary) {
    ExprPtr e = make(kind, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      ++p_;
      e = binary("or", std::move(e), parse_and(), Expr::kOr);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      ++p_;
      e = binary("and", std::move(e), parse_not(), Expr::kAnd);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      ++p_;
      ExprPtr e = make(Expr::kNot);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      if (t_[p_].kind == Tok::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        const std::string op = t_[p_++].text;
        e = binary(op, std::move(e), parse_math1());
      } else if (is_name("in")) {
        ++p_;
        e = binary("in", std::move(e), parse_math1());
      } else if (is_name("not") && t_[p_ + 1].kind == Tok::kName && t_[p_ + 1].text == "in") {
        p_ += 2;
        e = binary("in", std::move(e), parse_math1());
        e->negated = true;
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[p_++].text;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      ++p_;
      e = binary("~", std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_unary(true);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[p_++].text;
      e = binary(op, std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const std::string op = t_[p_++].text;
      e = make(Expr::kUnary, op);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (!with_filter) return e;
    while (true) {
      if (is_op("|")) {
        ++p_;
        ExprPtr f = make(Expr::kFilter, take_name());
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        ++p_;
        ExprPtr test = make(Expr::kTest);
        if (is_name("not")) {
          ++p_;
          test->negated = true;
        }
        test->name = take_name();
        test->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*test);
        } else if (!at_end() && t_[p_].kind != Tok::kOp && !is_name("and") && !is_name("or") &&
                   !is_name("else") && !is_name("if")) {
          test->args.push_back(parse_primary());  // `is divisibleby 3`, `is equalto x`
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_primary() {
    const Token& tok = t_[p_];
    if (tok.kind == Tok::kString) {
      ++p_;
      std::string s = tok.text;
      while (t_[p_].kind == Tok::kString) s += t_[p_++].text;  // adjacent literals join
      ExprPtr e = make(Expr::kLiteral);
      e->literal = s;
      return e;
    }
    if (tok.kind == Tok::kInt || tok.kind == Tok::kFloat) {
      ++p_;
      ExprPtr e = make(Expr::kLiteral);
      e->literal = tok.kind == Tok::kInt ? Value(std::stoll(tok.text)) : Value(std::stod(tok.text));
      return e;
    }
    if (tok.kind == Tok::kName) {
      ++p_;
      ExprPtr e = make(Expr::kLiteral);
      if (tok.text == "true" || tok.text == "True")
        e->literal = true;
      else if (tok.text == "false" || tok.text == "False")
        e->literal = false;
      else if (tok.text == "none" || tok.text == "None")
        e->literal = nullptr;
      else
        e = make(Expr::kName, tok.text);
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprPtr e = parse_expression();
      if (is_op(",")) fail("tuples are not supported");
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      ExprPtr e = make(Expr::kList);
      while (!is_op("]")) {
        e->args.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      ++p_;
      ExprPtr e = make(Expr::kDict);
      while (!is_op("}")) {
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + tok.text + "' in an expression");
  }
  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        ++p_;
        ExprPtr a = make(Expr::kAttr, take_name());
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++p_;
        ExprPtr lo, hi;
        if (!is_op(":")) lo = parse_expression();
        if (is_op(":")) {
          ++p_;
          if (!is_op("]")) hi = parse_expression();
          ExprPtr s = make(Expr::kSlice);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(lo));
          s->args.push_back(std::move(hi));
          e = std::move(s);
        } else {
          ExprPtr i = make(Expr::kIndex);
          i->args.push_back(std::move(e));
          i->args.push_back(std::move(lo));
          e = std::move(i);
        }
        expect_op("]");
      } else if (is_op("(")) {
        ExprPtr c = make(Expr::kCall);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (t_[p_].kind == Tok::kName && t_[p_ + 1].kind == Tok::kOp && t_[p_ + 1].text == "=") {
        std::string key = t_[p_].text;
        p_ += 2;
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        e.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
};

// ---- template structure -----------------------------------------------------------------------

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

// A piece of the source: text, or a tag's inside with its kind.
struct Piece {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
};

// Cuts the source into text and tags, applying whitespace control as transformers' Jinja
// environment does: trim_blocks (the newline after a block tag goes), lstrip_blocks (spaces
// before a block tag on its line go), "-" (all whitespace on that side goes), and the template's
// one trailing newline goes (keep_trailing_newline off).
std::vector<Piece> split(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();
  std::vector<Piece> out;
  size_t i = 0;
  bool strip_next = false, trim_newline = false;
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (strip_next) {
      const size_t k = text.find_first_not_of(" \t\r\n");
      text = k == std::string::npos ? "" : text.substr(k);
    } else if (trim_newline && !text.empty() && text.front() == '\n') {
      text.erase(0, 1);
    }
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::kText, text});
      break;
    }
    const char type = src[open + 1];
    const bool minus_left = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus_left = open + 2 < src.size() && src[open + 2] == '+';
    if (minus_left) {
      const size_t k = text.find_last_not_of(" \t\r\n");
      text = k == std::string::npos ? "" : text.substr(0, k + 1);
    } else if (type != '{' && !plus_left) {
      // lstrip_blocks: the spaces and tabs between the start of the line (in the source) and
      // the tag.
      size_t k = open;
      while (k > i && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
      if (k == 0 || src[k - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - k));
    }
    if (!text.empty()) out.push_back({Piece::kText, text});
    const std::string close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    const size_t end = src.find(close, open + 2);
    if (end == std::string::npos) fail(std::string("a '{") + type + "' tag is not closed");
    const bool minus_right = end > open + 2 && src[end - 1] == '-';
    const size_t inner_begin = open + 2 + (minus_left || plus_left ? 1 : 0);
    const size_t inner_end = end - (minus_right ? 1 : 0);
    if (type != '#')
      out.push_back(
          {type == '{' ? Piece::kExpr : Piece::kStmt,
           src.substr(inner_begin, inner_end > inner_begin ? inner_end - inner_begin : 0)});
    strip_next = minus_right;
    trim_newline = type != '{';
    i = end + 2;
  }
  return out;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  // Parses until one of `stops` ({% endif %} ...); returns that keyword and leaves its parser
  // in `tail` (positioned after the keyword).
  Body parse_body(const std::vector<std::string>& stops, std::string& stop_word,
                  std::unique_ptr<ExprParser>& tail) {
    Body body;
    while (pos_ < pieces_.size()) {
      const Piece& piece = pieces_[pos_++];
      if (piece.kind == Piece::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = piece.text;
        body.push_back(std::move(n));
        continue;
      }
      auto p = std::make_unique<ExprParser>(tokenize(piece.text));
      if (piece.kind == Piece::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->expr = p->parse_expression();
        p->expect_end();
        body.push_back(std::move(n));
        continue;
      }
      const std::string word = p->take_name();
      if (std::find(stops.begin(), stops.end(), word) != stops.end()) {
        stop_word = word;
        tail = std::move(p);
        return body;
      }
      body.push_back(parse_statement(word, *p));
    }
    if (!stops.empty())
      fail("the template ends inside a block: {% " + stops.back() + " %} missing");
    return body;
  }

 private:
  std::unique_ptr<Node> parse_statement(const std::string& word, ExprParser& p) {
    auto n = std::make_unique<Node>();
    std::string stop;
    std::unique_ptr<ExprParser> tail;
    if (word == "if") {
      n->kind = Node::kIf;
      ExprPtr cond = p.parse_expression();
      p.expect_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, stop, tail);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "endif") break;
        if (stop == "else") {
          tail->expect_end();
          Body e = parse_body({"endif"}, stop, tail);
          n->branches.emplace_back(nullptr, std::move(e));
          break;
        }
        cond = tail->parse_expression();
        tail->expect_end();
      }
    } else if (word == "for") {
      n->kind = Node::kFor;
      n->targets.push_back(p.take_name());
      while (p.is_op(",")) {
        p.expect_op(",");
        n->targets.push_back(p.take_name());
      }
      if (!p.is_name("in")) fail("expected 'in' in a for loop");
      p.take_name();
      n->expr = p.parse_expression();  // `for x in xs if cond`: the `if` ends the iterable
      if (n->expr->kind == Expr::kIf && is_undefined(n->expr->args[2]->literal)) {
        n->filter = std::move(n->expr->args[0]);
        n->expr = std::move(n->expr->args[1]);
      }
      if (p.is_name("recursive")) fail("recursive loops are not supported");
      p.expect_end();
      n->body = parse_body({"else", "endfor"}, stop, tail);
      if (stop == "else") n->else_body = parse_body({"endfor"}, stop, tail);
    } else if (word == "set") {
      n->kind = Node::kSet;
      n->targets.push_back(p.take_name());
      if (p.is_op(".")) {
        p.expect_op(".");
        n->targets.push_back(p.take_name());
      }
      if (!p.is_op("=")) fail("{% set %} blocks are not supported; use {% set name = value %}");
      p.expect_op("=");
      n->expr = p.parse_expression();
      p.expect_end();
    } else if (word == "break" || word == "continue") {
      n->kind = word == "break" ? Node::kBreak : Node::kContinue;
    } else {
      fail("the statement {% " + word + " %} is not supported");
    }
    return n;
  }

  std::vector<Piece> pieces_;
  size_t pos_ = 0;
};

// ---- evaluation -------------------------------------------------------------------------------

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Value& context) { scopes_.push_back(context); }

  Flow render(const Body& body, std::string& out) {
    for (const auto& n : body) {
      switch (n->kind) {
        case Node::kText:
          out += n->text;
          break;
        case Node::kOutput:
          out += text_of(eval(*n->expr));
          break;
        case Node::kIf:
          for (const auto& [cond, branch] : n->branches)
            if (!cond || truthy(eval(*cond))) {
              if (Flow f = render(branch, out); f != Flow::kNormal) return f;
              break;
            }
          break;
        case Node::kFor:
          render_for(*n, out);
          break;
        case Node::kSet: {
          Value v = eval(*n->expr);
          if (n->targets.size() == 1) {
            scopes_.back()[n->targets[0]] = std::move(v);
          } else {
            Value* ns = find(n->targets[0]);
            if (ns == nullptr || !ns->is_object())
              fail("cannot set an attribute of " + n->targets[0]);
            (*ns)[n->targets[1]] = std::move(v);
          }
          break;
        }
        case Node::kBreak:
          return Flow::kBreak;
        case Node::kContinue:
          return Flow::kContinue;
      }
    }
    return Flow::kNormal;
  }

 private:
  Value* find(const std::string& name) {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return &*it;
    return nullptr;
  }

  void render_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    std::vector<Value> items;
    if (seq.is_array()) {
      items.assign(seq.begin(), seq.end());
    } else if (seq.is_object()) {
      for (auto it = seq.begin(); it != seq.end(); ++it) items.push_back(it.key());
    } else if (seq.is_string()) {
      for (char c : seq.get<std::string>()) items.push_back(std::string(1, c));
    } else if (!is_undefined(seq) && !seq.is_null()) {
      fail("cannot loop over " + repr(seq));
    }
    // The loop's own scope: what the body sets stays inside (Jinja's scoping rule).
    const auto bind = [&](const Value& item) {
      if (n.targets.size() == 1) {
        scopes_.back()[n.targets[0]] = item;
        return;
      }
      if (!item.is_array() || item.size() != n.targets.size())
        fail("cannot unpack " + repr(item) + " into " + std::to_string(n.targets.size()) +
             " names");
      for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = item[k];
    };
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.push_back(Value::object());
        bind(item);
        if (truthy(eval(*n.filter))) kept.push_back(item);
        scopes_.pop_back();
      }
      items.swap(kept);
    }
    if (items.empty()) {
      render(n.else_body, out);
      return;
    }
    const int64_t length = int64_t(items.size());
    for (int64_t i = 0; i < length; ++i) {
      scopes_.push_back(Value::object());
      bind(items[size_t(i)]);
      scopes_.back()["loop"] = {{"index", i + 1},
                                {"index0", i},
                                {"revindex", length - i},
                                {"revindex0", length - i - 1},
                                {"first", i == 0},
                                {"last", i == length - 1},
                                {"length", length},
                                {"previtem", i > 0 ? items[size_t(i - 1)] : kUndefined},
                                {"nextitem", i + 1 < length ? items[size_t(i + 1)] : kUndefined}};
      const Flow f = render(n.body, out);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName: {
        if (const Value* v = find(e.name)) return *v;
        return kUndefined;
      }
      case Expr::kList: {
        Value list = Value::array();
        for (const auto& a : e.args) list.push_back(eval(*a));
        return list;
      }
      case Expr::kDict: {
        Value dict = Value::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = eval(*e.args[i]);
          if (!key.is_string()) fail("dictionary keys must be strings");
          dict[key.get<std::string>()] = eval(*e.args[i + 1]);
        }
        return dict;
      }
      case Expr::kAttr:
        return attribute(eval(*e.args[0]), e.name);
      case Expr::kIndex:
        return index(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::kSlice:
        return slice(e);
      case Expr::kCall:
        return call(e);
      case Expr::kFilter:
        return filter(e);
      case Expr::kTest:
        return test(e) != e.negated;
      case Expr::kUnary: {
        const Value v = eval(*e.args[0]);
        if (!v.is_number()) fail("unary " + e.name + " needs a number");
        if (e.name == "+") return v;
        return v.is_number_integer() ? Value(-v.get<int64_t>()) : Value(-v.get<double>());
      }
      case Expr::kNot:
        return !truthy(eval(*e.args[0]));
      case Expr::kAnd: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::kOr: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::kIf:
        return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
      case Expr::kBinary:
        return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.negated);
    }
    fail("unknown expression");
  }

  static Value attribute(const Value& v, const std::string& name) {
    if (is_undefined(v)) fail("'" + name + "' of an undefined value");
    if (v.is_object()) {
      const auto it = v.find(name);
      return it == v.end() ? kUndefined : *it;
    }
    return kUndefined;
  }

  // Where each character (code point) of a UTF-8 string starts, and its end: Python indexes
  // and slices characters, not bytes.
  static std::vector<size_t> char_offsets(const std::string& s) {
    std::vector<size_t> at;
    for (size_t i = 0; i < s.size(); ++i)
      if ((s[i] & 0xC0) != 0x80) at.push_back(i);
    at.push_back(s.size());
    return at;
  }

  static Value index(const Value& v, const Value& key) {
    if (is_undefined(v)) fail("an index of an undefined value");
    if (v.is_object()) {
      if (!key.is_string()) return kUndefined;
      const auto it = v.find(key.get<std::string>());
      return it == v.end() ? kUndefined : *it;
    }
    if ((v.is_array() || v.is_string()) && key.is_number_integer()) {
      const std::vector<size_t> at =
          v.is_string() ? char_offsets(v.get<std::string>()) : std::vector<size_t>();
      const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(at.size()) - 1;
      int64_t i = key.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return kUndefined;
      if (v.is_array()) return v[size_t(i)];
      return v.get<std::string>().substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
    }
    return kUndefined;
  }

  Value slice(const Expr& e) {
    const Value v = eval(*e.args[0]);
    if (!v.is_array() && !v.is_string()) fail("only lists and strings can be sliced");
    const std::vector<size_t> at =
        v.is_string() ? char_offsets(v.get<std::string>()) : std::vector<size_t>();
    const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(at.size()) - 1;
    const auto bound = [&](const ExprPtr& x, int64_t fallback) {
      if (!x) return fallback;
      const Value b = eval(*x);
      if (!b.is_number_integer()) fail("slice bounds must be integers");
      int64_t i = b.get<int64_t>();
      if (i < 0) i += n;
      return std::clamp<int64_t>(i, 0, n);
    };
    const int64_t lo = bound(e.args[1], 0), hi = std::max(lo, bound(e.args[2], n));
    if (v.is_string())
      return v.get<std::string>().substr(at[size_t(lo)], at[size_t(hi)] - at[size_t(lo)]);
    return Value(std::vector<Value>(v.begin() + lo, v.begin() + hi));
  }

  static bool equal(const Value& a, const Value& b) {
    if (is_undefined(a) || is_undefined(b)) return is_undefined(a) && is_undefined(b);
    return a == b;
  }

  static Value binary(const std::string& op, const Value& a, const Value& b, bool negated) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "~") return text_of(a) + text_of(b);
    if (op == "in") {
      bool found = false;
      if (b.is_string() && a.is_string())
        found = b.get<std::string>().find(a.get<std::string>()) != std::string::npos;
      else if (b.is_array())
        found = std::any_of(b.begin(), b.end(), [&](const Value& x) { return equal(x, a); });
      else if (b.is_object())
        found = a.is_string() && b.contains(a.get<std::string>());
      else
        fail("'in' needs a string, list or dictionary on its right");
      return found != negated;
    }
    if (op == "+" && a.is_string() && b.is_string())
      return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
      Value r = a;
      r.insert(r.end(), b.begin(), b.end());
      return r;
    }
    if (op == "*" && a.is_string() && b.is_number_integer()) {
      std::string r;
      for (int64_t i = 0; i < b.get<int64_t>(); ++i) r += a.get<std::string>();
      return r;
    }
    if (!a.is_number() || !b.is_number() || a.is_boolean() || b.is_boolean())
      fail("cannot apply '" + op + "' to " + repr(a) + " and " + repr(b));
    const bool ints = a.is_number_integer() && b.is_number_integer();
    const double x = a.get<double>(), y = b.get<double>();
    if (op == "<") return x < y;
    if (op == "<=") return x <= y;
    if (op == ">") return x > y;
    if (op == ">=") return x >= y;
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero");
    if (ints) {
      const int64_t i = a.get<int64_t>(), j = b.get<int64_t>();
      if (op == "+") return i + j;
      if (op == "-") return i - j;
      if (op == "*") return i * j;
      if (op == "//") return int64_t(std::floor(double(i) / double(j)));
      if (op == "%") return ((i % j) + j) % j;  // Python's sign: that of the divisor
    }
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - y * std::floor(x / y);
    fail("unknown operator " + op);
  }

  Value kwarg(const Expr& e, const char* name, size_t position, const Value& fallback) {
    for (const auto& [k, v] : e.kwargs)
      if (k == name) return eval(*v);
    return position < e.args.size() ? eval(*e.args[position]) : fallback;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::kName && find(callee.name) == nullptr) {
      if (callee.name == "raise_exception")
        MT_THROW(text_of(e.args.size() > 1 ? eval(*e.args[1]) : Value("")));
      if (callee.name == "range") {
        std::vector<int64_t> bounds;
        for (size_t i = 1; i < e.args.size(); ++i) {
          const Value b = eval(*e.args[i]);
          if (!b.is_number_integer()) fail("range() takes integers");
          bounds.push_back(b.get<int64_t>());
        }
        if (bounds.empty() || bounds.size() > 3) fail("range() takes 1 to 3 integers");
        const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
        const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
        const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
        if (step == 0) fail("range() step must not be zero");
        if ((stop - start) / step > 100000) fail("range() is too long");
        Value list = Value::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) list.push_back(i);
        return list;
      }
      if (callee.name == "namespace") {
        Value ns = Value::object();
        for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v);
        return ns;
      }
      fail("the function " + callee.name + "() is not supported");
    }
    if (callee.kind != Expr::kAttr)
      fail("only methods and raise_exception/range/namespace can be called");
    const Value self = eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (self.is_string()) {
      const std::string s = self.get<std::string>();
      const Value arg = e.args.size() > 1 ? eval(*e.args[1]) : kUndefined;
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string chars = arg.is_string() ? arg.get<std::string>() : " \t\n\r\f\v";
        size_t b = 0, end = s.size();
        if (m != "rstrip") b = std::min(s.find_first_not_of(chars), s.size());
        if (m != "lstrip") {
          const size_t k = s.find_last_not_of(chars);
          end = k == std::string::npos ? b : k + 1;
        }
        return end > b ? s.substr(b, end - b) : std::string();
      }
      if ((m == "startswith" || m == "endswith") && arg.is_string()) {
        const std::string& x = arg.get_ref<const std::string&>();
        if (x.size() > s.size()) return false;
        return m == "startswith" ? s.compare(0, x.size(), x) == 0
                                 : s.compare(s.size() - x.size(), x.size(), x) == 0;
      }
      if (m == "upper" || m == "lower") return filter_name(m, self);
      if (m == "split") {
        Value parts = Value::array();
        if (!arg.is_string() || arg.get<std::string>().empty()) {
          std::istringstream in(s);
          for (std::string w; in >> w;) parts.push_back(w);
          return parts;
        }
        const std::string& sep = arg.get_ref<const std::string&>();
        size_t from = 0;
        for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + sep.size())
          parts.push_back(s.substr(from, at - from));
        parts.push_back(s.substr(from));
        return parts;
      }
    }
    if (self.is_object() && (m == "items" || m == "keys" || m == "values" || m == "get")) {
      Value list = Value::array();
      if (m == "get") {
        const Value key = e.args.size() > 1 ? eval(*e.args[1]) : kUndefined;
        const Value fallback = e.args.size() > 2 ? eval(*e.args[2]) : Value(nullptr);
        return key.is_string() && self.contains(key.get<std::string>())
                   ? self[key.get<std::string>()]
                   : fallback;
      }
      for (auto it = self.begin(); it != self.end(); ++it)
        list.push_back(m == "items"  ? Value::array({it.key(), it.value()})
                       : m == "keys" ? Value(it.key())
                                     : it.value());
      return list;
    }
    fail("the method ." + m + "() is not supported on " + repr(self).substr(0, 60));
  }

  // upper / lower / capitalize with Unicode's simple case mappings (utf8proc); Python's full
  // mappings differ only for a few characters that change length (ß → SS, ligatures).
  static Value filter_name(const std::string& name, const Value& v) {
    if (!v.is_string()) fail("the filter " + name + " needs a string");
    const std::string& s = v.get_ref<const std::string&>();
    std::string out;
    bool first = true;
    for (size_t i = 0; i < s.size();) {
      utf8proc_int32_t cp = 0;
      const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(&s[i]),
                                                  utf8proc_ssize_t(s.size() - i), &cp);
      if (n <= 0) fail("the filter " + name + " needs UTF-8 text");
      const bool up = name == "upper" || (name == "capitalize" && first);
      cp = up ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
      utf8proc_uint8_t buf[4];
      out.append(reinterpret_cast<const char*>(buf), size_t(utf8proc_encode_char(cp, buf)));
      i += size_t(n);
      first = false;
    }
    return out;
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& f = e.name;
    if (f == "trim") {
      const std::string s = text_of(v);
      const size_t b = s.find_first_not_of(" \t\n\r\f\v");
      if (b == std::string::npos) return std::string();
      return s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return int64_t(char_offsets(v.get<std::string>()).size()) - 1;
      if (v.is_array() || v.is_object()) return int64_t(v.size());
      fail("the filter length needs a string, list or dictionary");
    }
    if (f == "upper" || f == "lower" || f == "capitalize") return filter_name(f, Value(text_of(v)));
    if (f == "string") return text_of(v);
    if (f == "default" || f == "d") {
      const bool boolean = truthy(kwarg(e, "boolean", 2, false));
      return is_undefined(v) || (boolean && !truthy(v)) ? kwarg(e, "default_value", 1, "") : v;
    }
    if (f == "first" || f == "last") {
      if (!v.is_array() || v.empty()) return kUndefined;
      return f == "first" ? v.front() : v.back();
    }
    if (f == "join") {
      if (!v.is_array()) fail("the filter join needs a list");
      const std::string sep = text_of(kwarg(e, "d", 1, ""));
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + text_of(v[i]);
      return s;
    }
    if (f == "tojson") {
      // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent), keys in order.
      const Value indent = kwarg(e, "indent", 1, nullptr);
      if (is_undefined(v)) fail("tojson of an undefined value");
      return python_json(v, indent.is_number_integer() ? int(indent.get<int64_t>()) : -1, 0);
    }
    if (f == "list") {
      if (v.is_array()) return v;
      if (v.is_string()) {
        Value list = Value::array();
        for (char c : v.get<std::string>()) list.push_back(std::string(1, c));
        return list;
      }
      fail("the filter list needs a list or a string");
    }
    fail("the filter " + f + " is not supported");
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& t = e.name;
    if (t == "defined") return !is_undefined(v);
    if (t == "undefined") return is_undefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number() && !v.is_boolean();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "odd" || t == "even") {
      if (!v.is_number_integer()) fail("the test " + t + " needs an integer");
      return (v.get<int64_t>() % 2 != 0) == (t == "odd");
    }
    if (t == "equalto" || t == "eq" || t == "sameas")
      return e.args.size() > 1 && equal(v, eval(*e.args[1]));
    fail("the test '" + t + "' is not supported");
  }

  std::vector<Value> scopes_;
};

}  // namespace

std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& context) {
  std::string stop;
  std::unique_ptr<ExprParser> tail;
  const Body body = TemplateParser(split(source)).parse_body({}, stop, tail);
  Renderer renderer(context);
  std::string out;
  renderer.render(body, out);
  return out;
}

}  // namespace megatron
