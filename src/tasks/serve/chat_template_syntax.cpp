#include "tasks/serve/chat_template_syntax.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace megatron::jinja {

namespace {

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

}  // namespace

Body parse_template(const std::string& source) {
  std::string stop;
  std::unique_ptr<ExprParser> tail;
  return TemplateParser(split(source)).parse_body({}, stop, tail);
}

}  // namespace megatron::jinja
