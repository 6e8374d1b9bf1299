// Jinja rendering: Python-like values (JSON plus undefined), operators, filters, tests, methods, loops,
// macros and namespaces, with bounded nesting, steps and output (see jinja.h for the subset).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>

#include "tokenizer/jinja_ast.h"

namespace kestrel::jinja {
namespace {

using json = nlohmann::ordered_json;

// ---- Values: JSON plus "undefined" -------------------------------------------------------------------
struct Value {
  json v;
  bool undefined = false;
  static Value undef() { return Value{nullptr, true}; }
};

bool truthy(const Value& x) {
  if (x.undefined || x.v.is_null()) return false;
  if (x.v.is_boolean()) return x.v.get<bool>();
  if (x.v.is_number()) return x.v.get<double>() != 0;
  if (x.v.is_string() || x.v.is_array() || x.v.is_object()) return !x.v.empty();
  return true;
}

std::string repr(const json& v);
std::string to_text(const Value& x) {
  if (x.undefined) return "";
  const json& v = x.v;
  if (v.is_string()) return v.get<std::string>();
  return repr(v);
}
std::string repr(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    std::string s = v.dump();
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  std::string out;
  if (v.is_array()) {
    out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + repr(v[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false) out += (first ? "" : ", ") + repr(it.key()) + ": " + repr(it.value());
  return out + "}";
}


// ---- Evaluation --------------------------------------------------------------------------------------
// Python's json.dumps: ", " and ": " separators (or newlines and `indent` spaces), non-ASCII kept.
std::string dumps(const json& v, int indent, int level = 0) {
  const auto pad = [&](int l) { return indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * l), ' ') : ""; };
  if (v.is_array()) {
    if (v.empty()) return "[]";
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? (indent > 0 ? "," : ", ") : "") + pad(level + 1) + dumps(v[i], indent, level + 1);
    return out + pad(level) + "]";
  }
  if (v.is_object()) {
    if (v.empty()) return "{}";
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false)
      out += (first ? "" : (indent > 0 ? "," : ", ")) + pad(level + 1) + json(it.key()).dump() + ": " +
             dumps(it.value(), indent, level + 1);
    return out + pad(level) + "}";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(const json& context) { scopes_.emplace_back(); for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = Value{it.value()}; }

  Flow run(const Node& n, std::string& out) {
    if (++steps_ > 10'000'000) fail("the template runs too long");
    if (out.size() > (16u << 20)) fail("the template's output exceeds 16 MiB");
    switch (n.kind) {
      case Node::Block:
        for (const auto& c : n.children)
          if (Flow f = run(*c, out); f != Flow::Normal) return f;
        return Flow::Normal;
      case Node::Text: out += n.text; return Flow::Normal;
      case Node::Output: out += to_text(eval(*n.expr)); return Flow::Normal;
      case Node::If:
        for (size_t i = 0; i < n.conditions.size(); ++i)
          if (!n.conditions[i] || truthy(eval(*n.conditions[i]))) return run(*n.children[i], out);
        return Flow::Normal;
      case Node::For: return run_for(n, out);
      case Node::Set: assign(n.targets, eval(*n.expr)); return Flow::Normal;
      case Node::SetBlock: {
        std::string text;
        run(*n.children[0], text);
        assign(n.targets, Value{text});
        return Flow::Normal;
      }
      case Node::Macro:
        scopes_.back()[n.targets[0]] = Value{json{{"__jinja_macro__", static_cast<int64_t>(macros_.size())}}};
        macros_.push_back(&n);
        return Flow::Normal;
      case Node::FilterBlock: {
        std::string text;
        run(*n.children[0], text);
        scopes_.emplace_back();
        scopes_.back()["__block__"] = Value{text};
        out += to_text(eval(*n.expr));
        scopes_.pop_back();
        return Flow::Normal;
      }
      case Node::Break: return Flow::Break;
      case Node::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

 private:
  Value* find(const std::string& name) {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return &it->second;
    return nullptr;
  }
  void assign(const std::vector<std::string>& targets, Value v) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = std::move(v);
      return;
    }
    Value* ns = find(targets[0]);
    if (!ns || !ns->v.is_object()) fail("cannot set '" + targets[1] + "' on '" + targets[0] + "' (not a namespace)");
    ns->v[targets[1]] = std::move(v.v);
  }

  static json items_of(const json& v) {
    if (v.is_array()) return v;
    json out = json::array();
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
    else if (v.is_string())
      for (char c : v.get<std::string>()) out.push_back(std::string(1, c));
    else if (!v.is_null())
      fail("cannot iterate over " + repr(v));
    return out;
  }

  Flow run_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    json all = seq.undefined ? json::array() : items_of(seq.v);
    json items = json::array();
    for (const json& item : all) {
      if (n.filter) {
        scopes_.emplace_back();
        bind(n.targets, item);
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (!keep) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) {
      if (n.else_body) run(*n.else_body, out);
      return Flow::Normal;
    }
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      bind(n.targets, items[i]);
      scopes_.back()["loop"] = Value{json{{"index", i + 1}, {"index0", i}, {"first", i == 0}, {"last", i + 1 == len},
                                          {"length", len}, {"revindex", len - i}, {"revindex0", len - i - 1},
                                          {"previtem", i > 0 ? items[i - 1] : json(nullptr)},
                                          {"nextitem", i + 1 < len ? items[i + 1] : json(nullptr)}}};
      const Flow f = run(*n.children[0], out);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }
  void bind(const std::vector<std::string>& targets, const json& item) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = Value{item};
      return;
    }
    if (!item.is_array() || item.size() != targets.size()) fail("cannot unpack " + repr(item) + " into " + std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = Value{item[k]};
  }

  static int64_t to_int(const Value& v, const char* what) {
    if (!v.v.is_number()) fail(std::string(what) + " must be a number");
    return static_cast<int64_t>(v.v.get<double>());
  }
  static std::string as_string(const Value& v, const char* what) {
    if (!v.v.is_string()) fail(std::string(what) + " must be a string");
    return v.v.get<std::string>();
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal: return Value{e.literal};
      case Expr::Name: {
        Value* v = find(e.name);
        return v ? *v : Value::undef();
      }
      case Expr::List: {
        json l = json::array();
        for (const auto& a : e.args) l.push_back(eval(*a).v);
        return Value{l};
      }
      case Expr::Dict: {
        json d = json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) d[to_text(eval(*e.args[i]))] = eval(*e.args[i + 1]).v;
        return Value{d};
      }
      case Expr::Attr: {
        const Value obj = eval(*e.args[0]);
        if (obj.v.is_object())
          if (auto it = obj.v.find(e.name); it != obj.v.end()) return Value{*it};
        return Value::undef();
      }
      case Expr::Index: return index(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Slice: return slice(eval(*e.args[0]), e.args[1] ? eval(*e.args[1]) : Value::undef(),
                                     e.args[2] ? eval(*e.args[2]) : Value::undef(),
                                     e.args[3] ? eval(*e.args[3]) : Value::undef());
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: {
        const bool r = test(e);
        return Value{e.negated ? !r : r};
      }
      case Expr::Unary: {
        const Value a = eval(*e.args[0]);
        if (e.name == "not") return Value{!truthy(a)};
        if (a.v.is_number_integer()) return Value{-a.v.get<int64_t>()};
        if (a.v.is_number()) return Value{-a.v.get<double>()};
        fail("cannot negate " + repr(a.v));
      }
      case Expr::Binary: return binary(e);
      case Expr::Ternary:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undef();
    }
    return Value::undef();
  }

  static Value index(const Value& obj, const Value& key) {
    if (obj.v.is_array() && key.v.is_number_integer()) {
      int64_t i = key.v.get<int64_t>();
      const int64_t n = static_cast<int64_t>(obj.v.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value{obj.v[static_cast<size_t>(i)]} : Value::undef();
    }
    if (obj.v.is_object() && key.v.is_string()) {
      auto it = obj.v.find(key.v.get<std::string>());
      return it != obj.v.end() ? Value{*it} : Value::undef();
    }
    if (obj.v.is_string() && key.v.is_number_integer()) {
      const std::string s = obj.v.get<std::string>();
      int64_t i = key.v.get<int64_t>();
      if (i < 0) i += static_cast<int64_t>(s.size());
      return i >= 0 && i < static_cast<int64_t>(s.size()) ? Value{std::string(1, s[static_cast<size_t>(i)])} : Value::undef();
    }
    return Value::undef();
  }
  // Python slicing obj[lo:hi:step] of a list or string.
  static Value slice(const Value& obj, const Value& lo, const Value& hi, const Value& step_v) {
    const bool str = obj.v.is_string();
    if (!str && !obj.v.is_array()) fail("cannot slice " + repr(obj.v));
    const int64_t n = static_cast<int64_t>(str ? obj.v.get<std::string>().size() : obj.v.size());
    const int64_t step = step_v.undefined || step_v.v.is_null() ? 1 : to_int(step_v, "a slice step");
    if (step == 0) fail("slice step cannot be zero");
    auto bound = [&](const Value& v, int64_t dflt) {
      if (v.undefined || v.v.is_null()) return dflt;
      int64_t i = to_int(v, "a slice bound");
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = bound(lo, step > 0 ? 0 : n - 1), e = bound(hi, step > 0 ? n : -1);
    std::string text;
    json out = json::array();
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
      if (str) text += obj.v.get<std::string>()[static_cast<size_t>(i)];
      else out.push_back(obj.v[static_cast<size_t>(i)]);
    }
    return str ? Value{text} : Value{out};
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "==") return Value{a.v == b.v && a.undefined == b.undefined};
    if (op == "!=") return Value{!(a.v == b.v && a.undefined == b.undefined)};
    if (op == "~") return Value{to_text(a) + to_text(b)};
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.v.is_string() && a.v.is_string()) found = b.v.get<std::string>().find(a.v.get<std::string>()) != std::string::npos;
      else if (b.v.is_array()) found = std::find(b.v.begin(), b.v.end(), a.v) != b.v.end();
      else if (b.v.is_object() && a.v.is_string()) found = b.v.contains(a.v.get<std::string>());
      else if (!b.undefined && !b.v.is_null()) fail("'in' needs a string, list or mapping on the right");
      return Value{op == "in" ? found : !found};
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (!((a.v.is_number() && b.v.is_number()) || (a.v.is_string() && b.v.is_string())))
        fail("cannot compare " + repr(a.v) + " and " + repr(b.v));
      const bool lt = a.v < b.v, gt = b.v < a.v;
      return Value{op == "<" ? lt : op == ">" ? gt : op == "<=" ? !gt : !lt};
    }
    if (op == "+") {
      if (a.v.is_string() && b.v.is_string()) return Value{a.v.get<std::string>() + b.v.get<std::string>()};
      if (a.v.is_array() && b.v.is_array()) {
        json l = a.v;
        for (const auto& x : b.v) l.push_back(x);
        return Value{l};
      }
    }
    if (op == "*" && a.v.is_string() && b.v.is_number_integer()) {
      std::string s;
      for (int64_t i = 0; i < b.v.get<int64_t>() && s.size() < (1u << 20); ++i) s += a.v.get<std::string>();
      return Value{s};
    }
    if (!a.v.is_number() || !b.v.is_number())
      fail("unsupported operands for '" + op + "': " + repr(a.v) + " and " + repr(b.v));
    const bool ints = a.v.is_number_integer() && b.v.is_number_integer();
    const double x = a.v.get<double>(), y = b.v.get<double>();
    if (op == "/") {
      if (y == 0) fail("division by zero");
      return Value{x / y};
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("division by zero");
      const double q = std::floor(x / y);
      const double r = x - q * y;
      if (ints) return Value{static_cast<int64_t>(op == "//" ? q : r)};
      return Value{op == "//" ? q : r};
    }
    const double r = op == "+" ? x + y : op == "-" ? x - y : x * y;
    if (ints) return Value{static_cast<int64_t>(r)};
    return Value{r};
  }

  bool test(const Expr& e) {
    const Value x = eval(*e.args[0]);
    const std::string& t = e.name;
    if (t == "defined") return !x.undefined;
    if (t == "undefined") return x.undefined;
    if (t == "none") return !x.undefined && x.v.is_null();
    if (t == "string") return x.v.is_string();
    if (t == "number") return x.v.is_number() && !x.v.is_boolean();
    if (t == "integer") return x.v.is_number_integer();
    if (t == "float") return x.v.is_number_float();
    if (t == "boolean") return x.v.is_boolean();
    if (t == "true") return x.v.is_boolean() && x.v.get<bool>();
    if (t == "false") return x.v.is_boolean() && !x.v.get<bool>();
    if (t == "mapping") return x.v.is_object();
    if (t == "iterable") return x.v.is_array() || x.v.is_object() || x.v.is_string();
    if (t == "sequence") return x.v.is_array() || x.v.is_string();
    if (t == "callable") return false;
    if (t == "lower") return x.v.is_string() && x.v.get<std::string>() == lower(x.v.get<std::string>());
    if (t == "upper") return x.v.is_string() && x.v.get<std::string>() == upper(x.v.get<std::string>());
    if (t == "odd" || t == "even") return x.v.is_number_integer() && (x.v.get<int64_t>() % 2 != 0) == (t == "odd");
    if (e.args.size() < 2) fail("unknown test '" + t + "'");
    const Value y = eval(*e.args[1]);
    if (t == "equalto" || t == "eq" || t == "sameas") return x.v == y.v;
    if (t == "ne") return x.v != y.v;
    if (t == "in") return (y.v.is_array() && std::find(y.v.begin(), y.v.end(), x.v) != y.v.end()) ||
                          (y.v.is_object() && x.v.is_string() && y.v.contains(x.v.get<std::string>()));
    if (t == "divisibleby") return x.v.is_number_integer() && to_int(y, "divisibleby") != 0 && x.v.get<int64_t>() % to_int(y, "divisibleby") == 0;
    fail("unknown test '" + t + "'");
  }
  // Applies test `name` (as in select/reject) to one item.
  bool apply_test(const std::string& name, const json& item, const std::vector<Value>& extra) {
    Expr probe = *make_expr(Expr::Test);
    probe.name = name;
    auto lit = [](const json& v) {
      auto p = make_expr(Expr::Literal);
      p->literal = v;
      return p;
    };
    probe.args = {lit(item)};
    for (const Value& v : extra) probe.args.push_back(lit(v.v));
    return test(probe);
  }

  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
  static std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
    if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
  }
  static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
    return s;
  }

  std::vector<Value> eval_args(const Expr& e, size_t skip) {
    std::vector<Value> out;
    for (size_t i = skip; i < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
    return out;
  }
  Value kwarg(const Expr& e, const std::string& key) {
    for (const auto& [k, v] : e.kwargs)
      if (k == key) return eval(*v);
    return Value::undef();
  }

  Value filter(const Expr& e) {
    const Value x = eval(*e.args[0]);
    const std::string& f = e.name;
    const std::vector<Value> a = eval_args(e, 1);
    auto arg = [&](size_t i) { return i < a.size() ? a[i] : Value::undef(); };
    if (f == "safe") return x;
    if (f == "e" || f == "escape") {
      std::string out;
      for (char c : to_text(x))
        out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : std::string(1, c);
      return Value{out};
    }
    if (f == "trim" || f == "strip") return Value{strip(to_text(x), " \t\r\n", true, true)};
    if (f == "upper") return Value{upper(to_text(x))};
    if (f == "lower") return Value{lower(to_text(x))};
    if (f == "capitalize") {
      std::string s = lower(to_text(x));
      if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
      return Value{s};
    }
    if (f == "string") return Value{to_text(x)};
    if (f == "length" || f == "count") {
      if (x.v.is_string()) return Value{static_cast<int64_t>(x.v.get<std::string>().size())};
      if (x.v.is_array() || x.v.is_object()) return Value{static_cast<int64_t>(x.v.size())};
      if (x.undefined) return Value{0};
      fail("'length' needs a string, list or mapping");
    }
    if (f == "tojson") {
      const Value ind = arg(0).undefined ? kwarg(e, "indent") : arg(0);
      return Value{dumps(x.v, ind.undefined || ind.v.is_null() ? 0 : static_cast<int>(to_int(ind, "indent")))};
    }
    if (f == "join") {
      const std::string sep = arg(0).undefined ? "" : to_text(arg(0));
      std::string out;
      const json items = items_of(x.v);
      for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + to_text(Value{items[i]});
      return Value{out};
    }
    if (f == "items") {
      json out = json::array();
      if (x.v.is_object())
        for (auto it = x.v.begin(); it != x.v.end(); ++it) out.push_back(json::array({it.key(), it.value()}));
      else if (!x.undefined && !x.v.is_null()) fail("'items' needs a mapping");
      return Value{out};
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(arg(1));
      return (x.undefined || (boolean && !truthy(x))) ? arg(0) : x;
    }
    if (f == "first" || f == "last") {
      const json items = items_of(x.v);
      if (items.empty()) return Value::undef();
      return Value{f == "first" ? items.front() : items.back()};
    }
    if (f == "list") return Value{items_of(x.v)};
    if (f == "reverse") {
      if (x.v.is_string()) {
        std::string s = x.v.get<std::string>();
        return Value{std::string(s.rbegin(), s.rend())};
      }
      json items = items_of(x.v);
      std::reverse(items.begin(), items.end());
      return Value{items};
    }
    if (f == "int") return Value{x.v.is_number() ? static_cast<int64_t>(x.v.get<double>()) : x.v.is_string() ? std::atoll(x.v.get<std::string>().c_str()) : 0};
    if (f == "float") return Value{x.v.is_number() ? x.v.get<double>() : x.v.is_string() ? std::atof(x.v.get<std::string>().c_str()) : 0.0};
    if (f == "abs") return x.v.is_number_integer() ? Value{std::llabs(x.v.get<int64_t>())} : Value{std::fabs(x.v.get<double>())};
    if (f == "round") return Value{std::round(x.v.get<double>())};
    if (f == "replace") return Value{replace_all(to_text(x), as_string(arg(0), "replace"), as_string(arg(1), "replace"))};
    if (f == "indent") {
      const int64_t width = arg(0).undefined ? 4 : to_int(arg(0), "indent");
      const bool first = truthy(arg(1)) || truthy(kwarg(e, "first"));
      const std::string pad(static_cast<size_t>(std::clamp<int64_t>(width, 0, 64)), ' ');
      std::string s = replace_all(to_text(x), "\n", "\n" + pad);
      return Value{first ? pad + s : s};
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      const bool attr = f.size() > 6;
      const bool keep_if = f[0] == 's';
      json out = json::array();
      for (const json& item : items_of(x.v)) {
        json subject = item;
        size_t first_test_arg = 0;
        if (attr) {
          const std::string key = as_string(arg(0), f.c_str());
          subject = item.is_object() && item.contains(key) ? item[key] : json(nullptr);
          first_test_arg = 1;
          if (a.size() <= 1) {  // no test: truthiness of the attribute
            if (truthy(Value{subject}) == keep_if) out.push_back(item);
            continue;
          }
        } else if (a.empty()) {
          if (truthy(Value{subject}) == keep_if) out.push_back(item);
          continue;
        }
        const std::string test_name = as_string(arg(first_test_arg), f.c_str());
        std::vector<Value> extra(a.begin() + static_cast<std::ptrdiff_t>(first_test_arg + 1), a.end());
        if (apply_test(test_name, subject, extra) == keep_if) out.push_back(item);
      }
      return Value{out};
    }
    if (f == "map") {
      json out = json::array();
      const Value attribute = kwarg(e, "attribute");
      for (const json& item : items_of(x.v)) {
        if (!attribute.undefined) {
          const std::string key = to_text(attribute);
          out.push_back(item.is_object() && item.contains(key) ? item[key] : json(nullptr));
        } else {
          Expr sub = *make_expr(Expr::Filter);
          sub.name = as_string(arg(0), "map");
          auto p = make_expr(Expr::Literal);
          p->literal = item;
          sub.args = {p};
          out.push_back(filter(sub).v);
        }
      }
      return Value{out};
    }
    if (f == "dictsort") {
      if (!x.v.is_object()) fail("'dictsort' needs a mapping");
      std::vector<std::pair<std::string, json>> items;
      for (auto it = x.v.begin(); it != x.v.end(); ++it) items.emplace_back(it.key(), it.value());
      std::sort(items.begin(), items.end(), [](const auto& l, const auto& r) { return lower(l.first) < lower(r.first); });
      json out = json::array();
      for (auto& [k, v] : items) out.push_back(json::array({k, v}));
      return Value{out};
    }
    if (f == "unique") {
      json out = json::array();
      for (const json& item : items_of(x.v))
        if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
      return Value{out};
    }
    fail("unsupported filter '" + f + "'");
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    const std::vector<Value> a = eval_args(e, 1);
    auto arg = [&](size_t i) { return i < a.size() ? a[i] : Value::undef(); };
    if (callee.kind == Expr::Attr) {
      const Value obj = eval(*callee.args[0]);
      const std::string& m = callee.name;
      if (obj.v.is_string()) {
        const std::string s = obj.v.get<std::string>();
        const std::string ws = " \t\r\n";
        if (m == "strip" || m == "lstrip" || m == "rstrip")
          return Value{strip(s, arg(0).undefined ? ws : to_text(arg(0)), m != "rstrip", m != "lstrip")};
        if (m == "lower") return Value{lower(s)};
        if (m == "upper") return Value{upper(s)};
        if (m == "startswith") return Value{s.rfind(as_string(arg(0), "startswith"), 0) == 0};
        if (m == "endswith") {
          const std::string t = as_string(arg(0), "endswith");
          return Value{s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0};
        }
        if (m == "replace") return Value{replace_all(s, as_string(arg(0), "replace"), as_string(arg(1), "replace"))};
        if (m == "find") return Value{static_cast<int64_t>(s.find(as_string(arg(0), "find")))};
        if (m == "split") {
          json out = json::array();
          if (arg(0).undefined || arg(0).v.is_null()) {
            size_t i = 0;
            while (i < s.size()) {
              i = s.find_first_not_of(ws, i);
              if (i == std::string::npos) break;
              const size_t j = std::min(s.find_first_of(ws, i), s.size());
              out.push_back(s.substr(i, j - i));
              i = j;
            }
          } else {
            const std::string sep = as_string(arg(0), "split");
            if (sep.empty()) fail("split: empty separator");
            size_t i = 0, j;
            while ((j = s.find(sep, i)) != std::string::npos) {
              out.push_back(s.substr(i, j - i));
              i = j + sep.size();
            }
            out.push_back(s.substr(i));
          }
          return Value{out};
        }
        if (m == "title" || m == "capitalize") {
          std::string r = lower(s);
          for (size_t i = 0; i < r.size(); ++i)
            if (i == 0 || (m == "title" && !std::isalpha(static_cast<unsigned char>(r[i - 1]))))
              r[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[i])));
          return Value{r};
        }
      }
      if (obj.v.is_object()) {
        if (m == "get") {
          const std::string key = to_text(arg(0));
          return obj.v.contains(key) ? Value{obj.v[key]} : (a.size() > 1 ? arg(1) : Value{nullptr});
        }
        if (m == "items" || m == "keys" || m == "values") {
          json out = json::array();
          for (auto it = obj.v.begin(); it != obj.v.end(); ++it)
            out.push_back(m == "items" ? json::array({it.key(), it.value()}) : m == "keys" ? json(it.key()) : it.value());
          return Value{out};
        }
      }
      fail("unsupported method '" + m + "' on " + (obj.undefined ? std::string("an undefined value") : repr(obj.v)));
    }
    if (callee.kind == Expr::Name) {
      const Value* v = find(callee.name);
      if (v && v->v.is_object() && v->v.contains("__jinja_macro__")) {
        const Node& macro = *macros_.at(static_cast<size_t>(v->v["__jinja_macro__"].get<int64_t>()));
        if (++depth_ > 64) fail("macros nest too deeply");
        scopes_.emplace_back();
        for (size_t k = 1; k < macro.targets.size(); ++k) {
          Value arg_value = k - 1 < a.size() ? a[k - 1] : Value::undef();
          for (const auto& [key, expr] : e.kwargs)
            if (key == macro.targets[k]) arg_value = eval(*expr);
          if (arg_value.undefined && macro.conditions[k - 1]) arg_value = eval(*macro.conditions[k - 1]);
          scopes_.back()[macro.targets[k]] = arg_value;
        }
        std::string text;
        run(*macro.children[0], text);
        scopes_.pop_back();
        --depth_;
        return Value{text};
      }
    }
    if (callee.kind == Expr::Name && !find(callee.name)) {
      const std::string& f = callee.name;
      if (f == "raise_exception") fail("the template raised: " + to_text(arg(0)));
      if (f == "namespace" || f == "dict") {
        json ns = json::object();
        for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v).v;
        return Value{ns};
      }
      if (f == "range") {
        int64_t b = 0, end = to_int(arg(0), "range"), step = 1;
        if (a.size() >= 2) b = end, end = to_int(arg(1), "range");
        if (a.size() >= 3) step = to_int(arg(2), "range");
        if (step == 0) fail("range: step must not be zero");
        json out = json::array();
        for (int64_t i = b; (step > 0 ? i < end : i > end) && out.size() < 100000; i += step) out.push_back(i);
        return Value{out};
      }
      if (f == "strftime_now") {
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[128];
        const size_t n = std::strftime(buf, sizeof buf, as_string(arg(0), "strftime_now").c_str(), &tm);
        return Value{std::string(buf, n)};
      }
      fail("unknown function '" + f + "'");
    }
    fail("this expression cannot be called");
  }

  std::vector<std::map<std::string, Value>> scopes_;
  std::vector<const Node*> macros_;  // defined so far; values name them by index
  int depth_ = 0;
  int64_t steps_ = 0;
};


}  // namespace

void render_template(const Node& root, const nlohmann::ordered_json& context, std::string& out) {
  Renderer(context).run(root, out);
}

}  // namespace kestrel::jinja
