#include "sample/regex_grammar.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <vector>

#include "core/utf8.h"

namespace kestrel {
namespace {

// Characters a JSON string must escape: never written by the grammar.
constexpr const char* kUnsafe = "\"\\\\\\x00-\\x1F";

std::string hex_escape(unsigned char c) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("\\x") + hex[c >> 4] + hex[c & 15];
}

// One byte inside a GBNF class or literal, escaped where GBNF would read it otherwise.
std::string class_char(unsigned char c) {
  if (c < 0x20 || c == '\\' || c == ']' || c == '[' || c == '^' || c == '-' || c == '"' || c == 0x7F) return hex_escape(c);
  return std::string(1, static_cast<char>(c));
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  Result<std::string> parse() {
    if (!utf8::well_formed(p_)) return Error{"pattern: not valid UTF-8"};
    bool anchored_start = false, anchored_end = false;
    std::string_view body = p_;
    if (!body.empty() && body.front() == '^') {
      anchored_start = true;
      body.remove_prefix(1);
    }
    if (!body.empty() && body.back() == '$' && !escaped_at(body.size() - 1, body)) {
      anchored_end = true;
      body.remove_suffix(1);
    }
    if ((anchored_start || anchored_end) && top_level_alternation(body))
      return Error{"pattern: anchors with a top-level '|' (write ^(a|b)$)"};
    p_ = body;
    pos_ = 0;
    std::string expr = alternation();
    if (error_.empty() && pos_ < p_.size()) fail("unbalanced ')'");
    if (!error_.empty()) return Error{"pattern: " + error_};
    return (anchored_start ? "" : "char* ") + std::string("( ") + expr + " )" + (anchored_end ? "" : " char*");
  }

 private:
  bool escaped_at(size_t i, std::string_view s) const {
    size_t n = 0;
    while (i > 0 && s[i - 1] == '\\') --i, ++n;
    return n % 2 == 1;
  }
  bool top_level_alternation(std::string_view s) const {
    int depth = 0;
    bool in_class = false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
        continue;
      }
      if (in_class) {
        in_class = s[i] != ']';
      } else if (s[i] == '[') {
        in_class = true;
      } else if (s[i] == '(') {
        ++depth;
      } else if (s[i] == ')') {
        --depth;
      } else if (s[i] == '|' && depth == 0) {
        return true;
      }
    }
    return false;
  }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message + " at offset " + std::to_string(pos_);
  }
  bool more() const { return pos_ < p_.size() && error_.empty(); }

  // Each sets nullable_: whether what it parsed can match the empty string.
  std::string alternation() {
    std::vector<std::string> alts = {sequence()};
    bool nullable = nullable_;
    while (more() && p_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
      nullable = nullable || nullable_;
    }
    nullable_ = nullable;
    std::string out;
    for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + (a.empty() ? "\"\"" : a);
    return out;
  }

  std::string sequence() {
    std::string out;
    bool nullable = true;
    while (more() && p_[pos_] != '|' && p_[pos_] != ')') {
      nullable_ = false;
      std::string atom_text = atom();
      const bool atom_nullable = nullable_;
      Repeat r = quantifier();
      // A repeated item that can match nothing would make a left-recursive rule: at most 8 repetitions
      // (a subset of what the pattern matches).
      if (atom_nullable && r.max < 0) r = {0, 8};
      nullable = nullable && (atom_nullable || r.min == 0);
      atom_text += r.gbnf();
      out += (out.empty() ? "" : " ") + atom_text;
    }
    nullable_ = nullable;
    return out;
  }

  // How often an atom repeats: min..max times, max < 0 for no bound.
  struct Repeat {
    int min = 1, max = 1;
    // GBNF's spelling of it ("" for exactly once).
    std::string gbnf() const {
      if (min == 1 && max == 1) return "";
      if (min == 0 && max == 1) return "?";
      if (max < 0 && min <= 1) return min == 0 ? "*" : "+";
      std::string q = "{";
      q += std::to_string(min);
      if (max != min) q += ",";
      if (max > min) q += std::to_string(max);
      q += "}";
      return q;
    }
  };

  Repeat quantifier() {
    if (!more()) return {};
    Repeat r;
    const char c = p_[pos_];
    if (c == '?' || c == '*' || c == '+') {
      r = c == '?' ? Repeat{0, 1} : c == '*' ? Repeat{0, -1} : Repeat{1, -1};
      ++pos_;
    } else if (c == '{') {
      // {m}, {m,} or {m,n} with m <= n <= 4096 (the grammar's bound).
      const size_t close = p_.find('}', pos_);
      const std::string body(p_.substr(pos_ + 1, close == std::string_view::npos ? 0 : close - pos_ - 1));
      const size_t comma = body.find(',');
      const std::string m = body.substr(0, comma), n = comma == std::string::npos ? m : body.substr(comma + 1);
      const auto count = [](const std::string& d) {
        if (d.empty() || d.size() > 4 || d.find_first_not_of("0123456789") != std::string::npos) return -1;
        const int v = std::stoi(d);
        return v <= 4096 ? v : -1;
      };
      const bool unbounded = comma != std::string::npos && n.empty();  // {m,}
      const int lo = count(m), hi = unbounded ? -1 : count(n);
      if (close == std::string_view::npos || lo < 0 || (!unbounded && (hi < 0 || hi < lo))) {
        fail("'{' is not a quantifier {m}, {m,} or {m,n} with m <= n <= 4096 (escape a literal '{' as \\{)");
        return {};
      }
      r = {lo, hi};
      pos_ = close + 1;
    } else {
      return {};
    }
    if (more() && p_[pos_] == '?') ++pos_;  // lazy: the same strings
    if (more() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' || p_[pos_] == '{')) fail("a quantifier after a quantifier");
    return r;
  }

  std::string atom() {
    const unsigned char c = static_cast<unsigned char>(p_[pos_]);
    switch (c) {
      case '(': {
        if (++depth_ > 64) {
          fail("groups nested more than 64 deep");
          return "";
        }
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] == '?') {
          if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            fail("lookaround and named groups are not supported");
            return "";
          }
        }
        std::string inner = alternation();
        if (pos_ >= p_.size() || p_[pos_] != ')') {
          fail("unclosed '('");
          return "";
        }
        ++pos_;
        --depth_;
        return "( " + (inner.empty() ? "\"\"" : inner) + " )";
      }
      case '[': return char_class();
      case '.': ++pos_; return std::string("[^") + kUnsafe + "]";
      case '\\': return escape();
      case '^': case '$': fail("anchors other than ^ at the start and $ at the end are not supported"); return "";
      case '*': case '+': case '?': case '{': fail("a quantifier with nothing before it"); return "";
      default: break;
    }
    // A literal character (the whole UTF-8 sequence).
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    n = std::min(n, p_.size() - pos_);
    const std::string ch(p_.substr(pos_, n));
    pos_ += n;
    if (c < 0x20 || c == '"') {
      fail("a character JSON strings escape");
      return "";
    }
    return "\"" + ch + "\"";
  }

  // The class text (without brackets) of a shorthand escape, negated or not; empty when not one.
  static std::string shorthand(char e, bool& negated) {
    negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
      case 'd': case 'D': return "0-9";
      case 'w': case 'W': return "0-9A-Za-z_";
      case 's': case 'S': return " ";
      default: return "";
    }
  }

  // An escaped character outside a class: a shorthand class, or the character itself.
  std::string escape() {
    if (pos_ + 1 >= p_.size()) {
      fail("a trailing '\\'");
      return "";
    }
    const char e = p_[pos_ + 1];
    if (static_cast<unsigned char>(e) >= 0x80) {  // an escaped non-ASCII character: itself
      ++pos_;
      return atom();
    }
    pos_ += 2;
    bool negated = false;
    if (const std::string cls = shorthand(e, negated); !cls.empty())
      return negated ? "[^" + cls + kUnsafe + "]" : "[" + cls + "]";
    const unsigned char lit = static_cast<unsigned char>(escaped_char(e));
    if (!error_.empty()) return "";
    std::string out = "[";
    out += class_char(lit);
    out += ']';
    return out;
  }

  // The character an escape such as \. or \- stands for; errors for what it cannot be.
  char escaped_char(char e) {
    if (std::isalnum(static_cast<unsigned char>(e))) {
      if (e == 'b' || e == 'B') fail("word boundaries (\\b) are not supported");
      else if (std::isdigit(static_cast<unsigned char>(e))) fail("backreferences are not supported");
      else if (e == 'p' || e == 'P') fail("Unicode property escapes are not supported");
      else if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v') fail("a control character JSON strings escape");
      else fail(std::string("the escape \\") + e + " is not supported");
      return 0;
    }
    if (e == '"' || e == '\\') fail("a character JSON strings escape");
    return e;
  }

  std::string char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::string items;
    bool first = true;
    while (pos_ < p_.size() && (p_[pos_] != ']' || first) && error_.empty()) {
      first = false;
      unsigned char lo = static_cast<unsigned char>(p_[pos_]);
      if (lo >= 0x80) {
        fail("non-ASCII characters in a class are not supported");
        return "";
      }
      if (lo == '\\') {
        if (pos_ + 1 >= p_.size()) break;
        bool shorthand_negated = false;
        if (const std::string cls = shorthand(p_[pos_ + 1], shorthand_negated); !cls.empty()) {
          if (shorthand_negated) {
            fail("\\D, \\W and \\S inside a class are not supported");
            return "";
          }
          items += cls;
          pos_ += 2;
          continue;
        }
        lo = static_cast<unsigned char>(escaped_char(p_[pos_ + 1]));
        if (lo >= 0x80) {
          fail("non-ASCII characters in a class are not supported");
          return "";
        }
        ++pos_;
      }
      ++pos_;
      unsigned char hi = lo;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        hi = static_cast<unsigned char>(p_[pos_ + 1]);
        pos_ += 2;
        if (hi == '\\' && pos_ < p_.size()) hi = static_cast<unsigned char>(escaped_char(p_[pos_++]));
        if (hi < lo || hi >= 0x80) {
          fail("a class range out of order (or not ASCII)");
          return "";
        }
      }
      if (!negated && (lo < 0x20 || hi < 0x20 || (lo <= '"' && hi >= '"') || (lo <= '\\' && hi >= '\\'))) {
        // Keep the JSON-safe parts of the range only.
        for (unsigned c = lo; c <= hi; ++c)
          if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F) items += class_char(static_cast<unsigned char>(c));
        continue;
      }
      items += class_char(lo);
      if (hi != lo) {
        items += '-';
        items += class_char(hi);
      }
    }
    if (pos_ >= p_.size()) {
      fail("unclosed '['");
      return "";
    }
    ++pos_;  // ']'
    if (negated) return "[^" + items + kUnsafe + "]";
    if (items.empty()) {
      fail("a class that matches no character JSON writes unescaped");
      return "";
    }
    return "[" + items + "]";
  }

  std::string_view p_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool nullable_ = false;
  std::string error_;
};

}  // namespace

Result<std::string> regex_to_grammar(std::string_view pattern) { return RegexParser(pattern).parse(); }

}  // namespace kestrel
