#include "tasks/serve/chat_template.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "tasks/serve/chat_template_syntax.h"

namespace megatron::jinja {

namespace {

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

}  // namespace megatron::jinja

namespace megatron {

std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& context) {
  const jinja::Body body = jinja::parse_template(source);
  jinja::Renderer renderer(context);
  std::string out;
  renderer.render(body, out);
  return out;
}

}  // namespace megatron
