// Jinja parsing: the source split into text and tags (whitespace control applied), expressions lexed and
// parsed by precedence, statements nested into a tree (see jinja.h for the subset).
#include <algorithm>
#include <cctype>

#include "tokenizer/jinja_ast.h"

namespace kestrel::jinja {
namespace {

using json = nlohmann::ordered_json;

// ---- Lexing ----------------------------------------------------------------------------------------
enum class Tok { Name, String, Int, Float, Op, End };
struct Token {
  Tok kind;
  std::string text;
};

std::vector<Token> lex_expression(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '_')) {
        if (s[j] == '.') {
          if (j + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j + 1]))) break;
          is_float = true;
        }
        ++j;
      }
      out.push_back({is_float ? Tok::Float : Tok::Int, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          text += s[j];
        }
      }
      if (j >= s.size()) fail("unterminated string literal");
      out.push_back({Tok::String, text});
      i = j + 1;
    } else {
      static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                  "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool matched = false;
      for (const char* op : ops) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Tok::Op, op});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected character '") + c + "' in an expression");
    }
  }
  out.push_back({Tok::End, ""});
  return out;
}

// Template source split into text and tags, with whitespace control applied.
struct Segment {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;
};

std::vector<Segment> split(const std::string& src) {
  std::vector<Segment> out;
  size_t i = 0;
  bool strip_next = false;       // a "-" closing the previous tag
  bool after_block = false;      // trim_blocks: drop one newline after a block tag
  while (i <= src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (after_block && !text.empty() && text[0] == '\n') text.erase(0, 1);
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text});
      break;
    }
    const char kind = src[open + 1];
    const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
    if (strip_before) {
      text.erase(text.find_last_not_of(" \t\r\n") == std::string::npos ? 0 : text.find_last_not_of(" \t\r\n") + 1);
    } else if (kind == '%' || kind == '#') {
      // lstrip_blocks: spaces and tabs between a line start and a block tag go.
      const size_t line = text.find_last_of('\n');
      const size_t from = line == std::string::npos ? 0 : line + 1;
      if (text.find_first_not_of(" \t", from) == std::string::npos && (line != std::string::npos || out.empty() || i > 0))
        text.erase(from);
    }
    if (!text.empty()) out.push_back({Segment::Text, text});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end = std::string::npos;
    if (kind == '#') {
      end = src.find(close, open + 2);
    } else {
      char quote = 0;  // the closing delimiter may appear inside a string literal
      for (size_t k = open + 2; k + 1 < src.size(); ++k) {
        const char ch = src[k];
        if (quote) {
          if (ch == '\\') ++k;
          else if (ch == quote) quote = 0;
        } else if (ch == '\'' || ch == '"') {
          quote = ch;
        } else if (src.compare(k, 2, close) == 0) {
          end = k;
          break;
        }
      }
    }
    if (end == std::string::npos) fail(std::string("unclosed tag '{") + kind + "'");
    size_t body_begin = open + 2 + (strip_before ? 1 : 0), body_end = end;
    strip_next = end > body_begin && src[end - 1] == '-';
    if (strip_next) --body_end;
    if (kind != '#') out.push_back({kind == '{' ? Segment::Expr : Segment::Stmt, src.substr(body_begin, body_end - body_begin)});
    after_block = kind != '{';
    i = end + 2;
  }
  return out;
}


class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> toks) : t_(std::move(toks)) {}
  ExprPtr parse() { return ternary(); }
  ExprPtr parse_iterable() { return or_expr(); }  // a for loop's iterable (its "if" is a filter)
  bool at_end() const { return t_[p_].kind == Tok::End; }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool accept_op(const char* op) {
    if (t_[p_].kind == Tok::Op && t_[p_].text == op) return ++p_, true;
    return false;
  }
  bool accept_name(const char* name) {
    if (t_[p_].kind == Tok::Name && t_[p_].text == name) return ++p_, true;
    return false;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "' but found '" + t_[p_].text + "'");
  }
  std::string expect_name() {
    if (t_[p_].kind != Tok::Name) fail("expected a name but found '" + t_[p_].text + "'");
    return t_[p_++].text;
  }

  ExprPtr ternary() {
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(depth) {
        if (++d > 200) fail("the expression nests too deeply");
      }
      ~Depth() { --d; }
    } guard(depth_);
    ExprPtr e = or_expr();
    if (accept_name("if")) {
      auto t = make_expr(Expr::Ternary);
      t->args = {or_expr(), e, nullptr};
      if (accept_name("else")) t->args[2] = ternary();
      return t;
    }
    return e;
  }

 private:
  ExprPtr bin(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make_expr(Expr::Binary);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = bin("or", e, and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = bin("and", e, not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (accept_name("not")) {
      auto e = make_expr(Expr::Unary);
      e->name = "not";
      e->args = {not_expr()};
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = add();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool done = true;
      for (const char* op : ops)
        if (accept_op(op)) {
          e = bin(op, e, add());
          done = false;
          break;
        }
      if (!done) continue;
      if (accept_name("in")) {
        e = bin("in", e, add());
      } else if (peek().kind == Tok::Name && peek().text == "not" && peek(1).kind == Tok::Name && peek(1).text == "in") {
        p_ += 2;
        e = bin("not in", e, add());
      } else if (accept_name("is")) {
        auto t = make_expr(Expr::Test);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->args = {e};
        if (accept_op("(")) {
          call_args(*t);
        } else if (peek().kind == Tok::String || peek().kind == Tok::Int || peek().kind == Tok::Float ||
                   (peek().kind == Tok::Name && peek().text != "and" && peek().text != "or" && peek().text != "else" &&
                    peek().text != "if")) {
          t->args.push_back(primary());
        }
        e = t;
      } else {
        return e;
      }
    }
  }
  ExprPtr add() {
    ExprPtr e = concat();
    for (;;) {
      if (accept_op("+")) e = bin("+", e, concat());
      else if (accept_op("-")) e = bin("-", e, concat());
      else return e;
    }
  }
  ExprPtr concat() {
    ExprPtr e = mul();
    while (accept_op("~")) e = bin("~", e, mul());
    return e;
  }
  ExprPtr mul() {
    ExprPtr e = unary();
    for (;;) {
      if (accept_op("*")) e = bin("*", e, unary());
      else if (accept_op("//")) e = bin("//", e, unary());
      else if (accept_op("/")) e = bin("/", e, unary());
      else if (accept_op("%")) e = bin("%", e, unary());
      else return e;
    }
  }
  ExprPtr unary() {
    if (depth_ > 200) fail("the expression nests too deeply");
    if (accept_op("-")) {
      auto e = make_expr(Expr::Unary);
      e->name = "-";
      e->args = {unary()};
      return e;
    }
    if (accept_op("+")) return unary();
    return postfix(primary());
  }
  void call_args(Expr& e) {
    if (accept_op(")")) return;
    do {
      if (peek().kind == Tok::Name && peek(1).kind == Tok::Op && peek(1).text == "=") {
        std::string key = expect_name();
        expect_op("=");
        e.kwargs.emplace_back(key, ternary());
      } else {
        e.args.push_back(ternary());
      }
    } while (accept_op(","));
    expect_op(")");
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make_expr(Expr::Attr);
        a->name = expect_name();
        a->args = {e};
        e = a;
      } else if (accept_op("[")) {
        ExprPtr lo = nullptr, hi = nullptr, step = nullptr;
        const auto at = [&](const char* op) { return peek().kind == Tok::Op && peek().text == op; };
        if (!at(":")) lo = ternary();
        if (accept_op(":")) {
          if (!at("]") && !at(":")) hi = ternary();
          if (accept_op(":") && !at("]")) step = ternary();
          expect_op("]");
          auto s = make_expr(Expr::Slice);
          s->args = {e, lo, hi, step};
          e = s;
          continue;
        }
        expect_op("]");
        auto ix = make_expr(Expr::Index);
        ix->args = {e, lo};
        e = ix;
      } else if (accept_op("(")) {
        auto c = make_expr(Expr::Call);
        c->args = {e};
        call_args(*c);
        e = c;
      } else if (accept_op("|")) {
        auto f = make_expr(Expr::Filter);
        f->name = expect_name();
        f->args = {e};
        if (accept_op("(")) call_args(*f);
        e = f;
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token tok = t_[p_];
    auto lit = [](json v) {
      auto e = make_expr(Expr::Literal);
      e->literal = std::move(v);
      return e;
    };
    switch (tok.kind) {
      case Tok::String: {
        ++p_;
        std::string s = tok.text;
        while (peek().kind == Tok::String) s += t_[p_++].text;  // adjacent literals join
        return lit(s);
      }
      case Tok::Int: ++p_; return lit(std::stoll(tok.text));
      case Tok::Float: ++p_; return lit(std::stod(tok.text));
      case Tok::Name: {
        ++p_;
        if (tok.text == "true" || tok.text == "True") return lit(true);
        if (tok.text == "false" || tok.text == "False") return lit(false);
        if (tok.text == "none" || tok.text == "None") return lit(nullptr);
        auto e = make_expr(Expr::Name);
        e->name = tok.text;
        return e;
      }
      case Tok::Op:
        if (accept_op("(")) {
          ExprPtr e = ternary();
          if (accept_op(",")) {  // a tuple: a list here
            auto l = make_expr(Expr::List);
            l->args = {e};
            if (!accept_op(")")) {
              do l->args.push_back(ternary()); while (accept_op(","));
              expect_op(")");
            }
            return l;
          }
          expect_op(")");
          return e;
        }
        if (accept_op("[")) {
          auto l = make_expr(Expr::List);
          if (!accept_op("]")) {
            do {
              if (peek().kind == Tok::Op && peek().text == "]") break;
              l->args.push_back(ternary());
            } while (accept_op(","));
            expect_op("]");
          }
          return l;
        }
        if (accept_op("{")) {
          auto d = make_expr(Expr::Dict);
          if (!accept_op("}")) {
            do {
              if (peek().kind == Tok::Op && peek().text == "}") break;
              d->args.push_back(ternary());
              expect_op(":");
              d->args.push_back(ternary());
            } while (accept_op(","));
            expect_op("}");
          }
          return d;
        }
        break;
      case Tok::End: fail("the expression ends too early");
    }
    fail("unexpected '" + tok.text + "' in an expression");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;  // nesting of sub-expressions (bounded: no stack exhaustion on hostile input)
};


class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  NodePtr parse_all() {
    auto root = block({});
    if (i_ < s_.size()) fail("unexpected '{% " + first_word(s_[i_].text) + " %}'");
    return root;
  }

 private:
  static std::string first_word(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    const size_t e = s.find_first_of(" \t\r\n(", b);
    return s.substr(b, e == std::string::npos ? std::string::npos : e - b);
  }
  // Parses until a statement whose first word is in `ends` (left unconsumed).
  NodePtr block(const std::vector<std::string>& ends) {
    if (!ends.empty() && ++depth_ > 100) fail("statements nest too deeply");
    auto node = std::make_shared<Node>();
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.kind == Segment::Text) {
        auto t = make_node(Node::Text);
        t->text = seg.text;
        node->children.push_back(t);
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Expr) {
        ExprParser p(lex_expression(seg.text));
        auto out = make_node(Node::Output);
        out->expr = p.parse();
        if (!p.at_end()) fail("unexpected '" + p.peek().text + "' in {{ " + seg.text + " }}");
        node->children.push_back(out);
        ++i_;
        continue;
      }
      const std::string word = first_word(seg.text);
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
        --depth_;
        return node;
      }
      node->children.push_back(statement(word));
    }
    if (!ends.empty()) fail("missing '{% " + ends.back() + " %}'");
    return node;
  }

  ExprParser stmt_expr() {
    const std::string& t = s_[i_].text;
    const size_t b = t.find_first_not_of(" \t\r\n");
    const std::string word = first_word(t);
    return ExprParser(lex_expression(t.substr(b + word.size())));
  }
  static void expect_end(const ExprParser& p) {
    if (!p.at_end()) fail("unexpected '" + p.peek().text + "' in a statement");
  }

  NodePtr statement(const std::string& word) {
    if (word == "if") {
      auto node = make_node(Node::If);
      for (;;) {
        const std::string w = first_word(s_[i_].text);
        if (w == "if" || w == "elif") {
          ExprParser p = stmt_expr();
          node->conditions.push_back(p.parse());
          expect_end(p);
        } else {
          node->conditions.push_back(nullptr);  // else
        }
        ++i_;
        node->children.push_back(block({"elif", "else", "endif"}));
        const std::string end = first_word(s_[i_].text);
        if (end == "endif") break;
        if (node->conditions.back() == nullptr) fail("'{% " + end + " %}' after '{% else %}'");
      }
      ++i_;
      return node;
    }
    if (word == "for") {
      auto node = make_node(Node::For);
      ExprParser p = stmt_expr();
      do node->targets.push_back(p.expect_name()); while (p.accept_op(","));
      if (!p.accept_name("in")) fail("expected 'in' in a for loop");
      node->expr = p.parse_iterable();
      if (p.accept_name("if")) node->filter = p.parse();
      p.accept_name("recursive");
      expect_end(p);
      ++i_;
      node->children.push_back(block({"else", "endfor"}));
      if (first_word(s_[i_].text) == "else") {
        ++i_;
        node->else_body = block({"endfor"});
      }
      ++i_;
      return node;
    }
    if (word == "set") {
      ExprParser p = stmt_expr();
      auto node = make_node(Node::Set);
      node->targets.push_back(p.expect_name());
      if (p.accept_op(".")) node->targets.push_back(p.expect_name());
      if (p.accept_op("=")) {
        node->expr = p.parse();
        expect_end(p);
        ++i_;
        return node;
      }
      expect_end(p);
      ++i_;
      node->kind = Node::SetBlock;
      node->children.push_back(block({"endset"}));
      ++i_;
      return node;
    }
    if (word == "macro") {
      ExprParser p = stmt_expr();
      auto node = make_node(Node::Macro);
      node->targets.push_back(p.expect_name());
      p.expect_op("(");
      if (!p.accept_op(")")) {
        do {
          node->targets.push_back(p.expect_name());
          node->conditions.push_back(p.accept_op("=") ? p.parse() : nullptr);
        } while (p.accept_op(","));
        p.expect_op(")");
      }
      expect_end(p);
      ++i_;
      node->children.push_back(block({"endmacro"}));
      ++i_;
      return node;
    }
    if (word == "filter") {
      // {% filter name(args) %}: parsed as the filter expression applied to a placeholder.
      const std::string& t = s_[i_].text;
      ExprParser p(lex_expression("__block__ | " + t.substr(t.find("filter") + 6)));
      auto node = make_node(Node::FilterBlock);
      node->expr = p.parse();
      expect_end(p);
      ++i_;
      node->children.push_back(block({"endfilter"}));
      ++i_;
      return node;
    }
    if (word == "generation") {  // Hugging Face's marker of assistant text: rendered as is
      ++i_;
      auto body = block({"endgeneration"});
      ++i_;
      return body;
    }
    if (word == "break" || word == "continue") {
      ++i_;
      return make_node(word == "break" ? Node::Break : Node::Continue);
    }
    fail("unsupported statement '{% " + word + " %}'");
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;
};



}  // namespace

NodePtr parse_template(const std::string& source) { return StmtParser(split(source)).parse_all(); }

}  // namespace kestrel::jinja
