// The syntax tree shared by the Jinja parser (jinja_parse.cpp) and renderer (jinja_render.cpp). Internal to
// the tokenizer module: include only from those files and jinja.cpp.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel::jinja {

struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void fail(const std::string& what) { throw JinjaError(what); }

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;
struct Expr {
  enum Kind { Literal, Name, List, Dict, Attr, Index, Slice, Call, Filter, Test, Unary, Binary, Ternary } kind = Literal;
  nlohmann::ordered_json literal;
  std::string name;                  // Name, Attr, Filter, Test; operator for Unary/Binary
  std::vector<ExprPtr> args;         // operands / call arguments / list items / dict keys and values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;              // "is not"
};

inline ExprPtr make_expr(Expr::Kind kind) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  return e;
}


struct Node {
  enum Kind { Block, Text, Output, If, For, Set, SetBlock, Break, Continue, Macro, FilterBlock } kind = Block;
  std::string text;                     // Text
  ExprPtr expr;                         // Output, Set value, For iterable, If (per branch below)
  std::vector<std::shared_ptr<Node>> children;  // Block body; If: one Block per branch
  std::vector<ExprPtr> conditions;      // If: per branch (null for else); Macro: parameter defaults (or null)
  std::vector<std::string> targets;     // For loop variables; Set: name and optional attribute; Macro: name, params
  ExprPtr filter;                       // For ... if filter
  std::shared_ptr<Node> else_body;      // For ... else
};
using NodePtr = std::shared_ptr<Node>;
inline NodePtr make_node(Node::Kind kind) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  return n;
}

// The template's tree; throws JinjaError naming what is wrong or unsupported.
NodePtr parse_template(const std::string& source);
// Appends the rendering of `root` with `context` (an object of variables) to out; throws JinjaError.
void render_template(const Node& root, const nlohmann::ordered_json& context, std::string& out);

}  // namespace kestrel::jinja
