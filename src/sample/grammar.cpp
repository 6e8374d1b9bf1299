#include "sample/grammar.h"

#include <algorithm>
#include <functional>
#include <map>

namespace kestrel {

bool Grammar::matches(int32_t position, uint32_t c) const {
  const GrammarElement& e = elements[static_cast<size_t>(position)];
  bool in = false;
  for (int32_t i = 0; i < e.n_ranges && !in; ++i) {
    const CodePointRange& r = ranges[static_cast<size_t>(e.first_range + i)];
    in = c >= r.lo && c <= r.hi;
  }
  return in != e.negated;
}

bool Grammar::matches_any(int32_t position, uint32_t lo, uint32_t hi) const {
  const GrammarElement& e = elements[static_cast<size_t>(position)];
  if (e.negated) {
    // Some code point of [lo, hi] lies outside every range unless the ranges cover it all.
    std::vector<CodePointRange> rs(ranges.begin() + e.first_range, ranges.begin() + e.first_range + e.n_ranges);
    std::sort(rs.begin(), rs.end(), [](const CodePointRange& a, const CodePointRange& b) { return a.lo < b.lo; });
    uint64_t next = lo;  // the first code point not yet known to be covered
    for (const CodePointRange& r : rs) {
      if (r.lo > next) break;
      next = std::max<uint64_t>(next, static_cast<uint64_t>(r.hi) + 1);
    }
    return next <= hi;
  }
  for (int32_t i = 0; i < e.n_ranges; ++i) {
    const CodePointRange& r = ranges[static_cast<size_t>(e.first_range + i)];
    if (r.lo <= hi && lo <= r.hi) return true;
  }
  return false;
}

namespace {

constexpr int kMaxNesting = 128;            // parentheses inside parentheses
constexpr uint32_t kMaxRepeat = 4096;       // {m,n} bounds
constexpr size_t kMaxElements = 1 << 20;    // the compiled grammar's size

// One alternative while parsing: elements without the End marker; repetitions turn the last item into
// a rule reference, so an item is always one element.
using Sequence = std::vector<GrammarElement>;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<Grammar> parse(std::string_view root_name) {
    skip_space();
    if (at_end()) return fail("a rule (name ::= ...)");
    while (!at_end()) {
      std::string name = read_name();
      if (name.empty()) return fail("a rule name");
      skip_space();
      if (text_.substr(pos_, 3) != "::=") return fail("'::=' after the rule name '" + name + "'");
      pos_ += 3;
      const int32_t rule = rule_id(name);
      if (defined_[static_cast<size_t>(rule)]) return fail("one definition of rule '" + name + "' (it is defined twice)");
      defined_[static_cast<size_t>(rule)] = true;
      auto alts = parse_alternatives(name, 0);
      if (!alts.ok()) return Error{alts.error()};
      set_rule(rule, std::move(alts.value()));
      if (!error_.empty()) return Error{error_};
    }
    for (size_t r = 0; r < defined_.size(); ++r)
      if (!defined_[r]) return Error{"grammar: rule '" + names_[r] + "' is used but never defined"};
    auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) return Error{"grammar: no rule named '" + std::string(root_name) + "' (the start rule)"};
    Grammar g = build();
    g.root = root->second;
    if (Status s = check_left_recursion(g); !s.ok()) return Error{s.error()};
    return g;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  Error fail(const std::string& expected) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') { ++line; column = 1; } else { ++column; }
    }
    std::string found = "the end of the text";
    if (!at_end()) {  // appended, not operator+ (GCC 12 warns falsely about that one with -O2 on AArch64)
      found = "'";
      found.append(text_.substr(pos_, 12)).append("'");
    }
    return Error{"grammar: line " + std::to_string(line) + ", column " + std::to_string(column) + ": expected " +
                 expected + ", found " + found};
  }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether the text at pos_ starts a new rule ("name ::="), which ends the current one.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  int32_t rule_id(const std::string& name) {
    auto [it, added] = ids_.emplace(name, static_cast<int32_t>(names_.size()));
    if (added) {
      names_.push_back(name);
      defined_.push_back(false);
      rules_.emplace_back();
    }
    return it->second;
  }

  int32_t new_rule(const std::string& parent) {
    const int32_t id = static_cast<int32_t>(names_.size());
    names_.push_back(parent + "_" + std::to_string(id));
    defined_.push_back(true);
    rules_.emplace_back();
    return id;
  }

  void set_rule(int32_t rule, std::vector<Sequence> alts) {
    for (const Sequence& s : alts) n_elements_ += s.size() + 1;
    if (n_elements_ > kMaxElements && error_.empty())
      error_ = "grammar: over " + std::to_string(kMaxElements) + " elements once repetitions are expanded";
    rules_[static_cast<size_t>(rule)] = std::move(alts);
  }

  static GrammarElement ref(int32_t rule) {
    GrammarElement e;
    e.kind = GrammarElement::Kind::RuleRef;
    e.rule = rule;
    return e;
  }

  GrammarElement chars(const std::vector<CodePointRange>& rs, bool negated) {
    GrammarElement e;
    e.kind = GrammarElement::Kind::Chars;
    e.negated = negated;
    e.first_range = static_cast<int32_t>(ranges_.size());
    e.n_ranges = static_cast<int32_t>(rs.size());
    ranges_.insert(ranges_.end(), rs.begin(), rs.end());
    return e;
  }

  // alternatives := sequence ('|' sequence)*; at depth 0 it ends at the next rule or the text's end,
  // inside parentheses at ')'.
  Result<std::vector<Sequence>> parse_alternatives(const std::string& rule_name, int depth) {
    if (depth > kMaxNesting) return fail("at most " + std::to_string(kMaxNesting) + " nested parentheses");
    std::vector<Sequence> alts;
    for (;;) {
      auto seq = parse_sequence(rule_name, depth);
      if (!seq.ok()) return Error{seq.error()};
      alts.push_back(std::move(seq.value()));
      skip_space();
      if (peek() != '|') break;
      ++pos_;
    }
    return alts;
  }

  Result<Sequence> parse_sequence(const std::string& rule_name, int depth) {
    Sequence seq;
    for (;;) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')') break;
      if (depth == 0 && at_rule_start()) break;
      const char c = peek();
      if (c == '"') {
        ++pos_;
        Sequence literal;
        while (!at_end() && peek() != '"' && peek() != '\n') {
          auto cp = read_char();
          if (!cp.ok()) return Error{cp.error()};
          literal.push_back(chars({{cp.value(), cp.value()}}, false));
        }
        if (peek() != '"') return fail("'\"' to close the string");
        ++pos_;
        const char after = peek();
        if (literal.size() == 1 || (after != '*' && after != '+' && after != '?' && after != '{')) {
          seq.insert(seq.end(), literal.begin(), literal.end());
          if (literal.size() != 1) continue;
        } else {
          // A repetition applies to the whole string: make it one rule.
          const int32_t group = new_rule(rule_name);
          set_rule(group, {std::move(literal)});
          seq.push_back(ref(group));
        }
      } else if (c == '[') {
        ++pos_;
        bool negated = false;
        if (peek() == '^') { negated = true; ++pos_; }
        std::vector<CodePointRange> rs;
        while (!at_end() && peek() != ']') {
          auto lo = read_char();
          if (!lo.ok()) return Error{lo.error()};
          uint32_t hi = lo.value();
          if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
            ++pos_;
            auto h = read_char();
            if (!h.ok()) return Error{h.error()};
            hi = h.value();
            if (hi < lo.value()) return fail("a range whose end is not below its start");
          }
          rs.push_back({lo.value(), hi});
        }
        if (at_end()) return fail("']' to close the character class");
        ++pos_;
        seq.push_back(chars(rs, negated));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(chars({}, true));
      } else if (c == '(') {
        ++pos_;
        auto alts = parse_alternatives(rule_name, depth + 1);
        if (!alts.ok()) return Error{alts.error()};
        skip_space();
        if (peek() != ')') return fail("')' to close the group");
        ++pos_;
        const int32_t group = new_rule(rule_name);
        set_rule(group, std::move(alts.value()));
        seq.push_back(ref(group));
      } else if (is_name_char(c)) {
        seq.push_back(ref(rule_id(read_name())));
      } else {
        return fail("a string, a character class, '.', '(' or a rule name");
      }
      if (Status s = parse_repetition(rule_name, seq); !s.ok()) return Error{s.error()};
      if (!error_.empty()) return Error{error_};
    }
    return seq;
  }

  // Applies a following * + ? {m} {m,} {m,n} to the sequence's last element.
  Status parse_repetition(const std::string& rule_name, Sequence& seq) {
    const char c = peek();
    if (c != '*' && c != '+' && c != '?' && c != '{') return {};
    ++pos_;
    uint32_t min = 0, max = 0;
    bool unbounded = false;
    if (c == '*') { unbounded = true; }
    else if (c == '+') { min = 1; unbounded = true; }
    else if (c == '?') { max = 1; }
    else {
      auto m = read_number();
      if (!m.ok()) return Status(Error{m.error()});
      min = max = m.value();
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        if (peek() == '}') {
          unbounded = true;
        } else {
          auto n = read_number();
          if (!n.ok()) return Status(Error{n.error()});
          max = n.value();
          if (max < min) return Status(fail("a repetition whose maximum is not below its minimum"));
        }
      }
      skip_space();
      if (peek() != '}') return Status(fail("'}' to close the repetition"));
      ++pos_;
    }
    const GrammarElement item = seq.back();
    seq.pop_back();
    for (uint32_t i = 0; i < min; ++i) seq.push_back(item);
    if (unbounded) {
      const int32_t star = new_rule(rule_name);  // star ::= item star | ε
      set_rule(star, {{item, ref(star)}, {}});
      seq.push_back(ref(star));
    } else if (max > min) {
      // (item (item (...)?)?)?: nested optionals, each one rule.
      int32_t inner = -1;
      for (uint32_t i = min; i < max; ++i) {
        const int32_t opt = new_rule(rule_name);
        Sequence body = {item};
        if (inner >= 0) body.push_back(ref(inner));
        set_rule(opt, {body, {}});
        inner = opt;
      }
      seq.push_back(ref(inner));
    }
    if (n_elements_ + seq.size() > kMaxElements)
      return Status(Error{"grammar: over " + std::to_string(kMaxElements) + " elements once repetitions are expanded"});
    return {};
  }

  Result<uint32_t> read_number() {
    skip_space();
    const size_t start = pos_;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepeat) return fail("a repetition count of at most " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    if (pos_ == start) return fail("a number");
    return static_cast<uint32_t>(v);
  }

  // One code point of a string or class: UTF-8 text or an escape.
  Result<uint32_t> read_char() {
    const auto byte = static_cast<unsigned char>(peek());
    if (byte == '\\') {
      ++pos_;
      if (at_end()) return fail("an escaped character");
      const char e = text_[pos_++];
      switch (e) {
        case 'n': return 0x0Au;
        case 'r': return 0x0Du;
        case 't': return 0x09u;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return static_cast<uint32_t>(e);
        case 'x': return read_hex(2);
        case 'u': return read_hex(4);
        case 'U': return read_hex(8);
        default: --pos_; return fail("an escape (\\n \\r \\t \\\\ \\\" \\] \\- \\xHH \\uHHHH \\UHHHHHHHH)");
      }
    }
    int n = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : (byte >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > text_.size()) return fail("UTF-8 text");
    uint32_t cp = n == 1 ? byte : byte & (0x7Fu >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return fail("UTF-8 text");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  Result<uint32_t> read_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail(std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) return fail("a code point up to U+10FFFF");
    return v;
  }

  Grammar build() {
    Grammar g;
    g.ranges = std::move(ranges_);
    g.rule_names = names_;
    g.rule_alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& alt : rules_[r]) {
        g.rule_alts[r].push_back(static_cast<int32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alt.begin(), alt.end());
        g.elements.push_back(GrammarElement{});
      }
    }
    return g;
  }

  // A rule that can reach itself through references preceded only by nullable elements would make
  // stack expansion loop forever.
  static Status check_left_recursion(const Grammar& g) {
    const size_t n = g.rule_alts.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (int32_t p : g.rule_alts[r]) {
          bool all = true;
          for (; g.elements[static_cast<size_t>(p)].kind != GrammarElement::Kind::End; ++p) {
            const GrammarElement& e = g.elements[static_cast<size_t>(p)];
            if (e.kind == GrammarElement::Kind::Chars || !nullable[static_cast<size_t>(e.rule)]) { all = false; break; }
          }
          if (all) { nullable[r] = true; changed = true; break; }
        }
      }
    }
    // Edges r -> s where s is referenced after only nullable elements of one of r's alternatives.
    std::vector<std::vector<int32_t>> leading(n);
    for (size_t r = 0; r < n; ++r)
      for (int32_t p : g.rule_alts[r])
        for (; g.elements[static_cast<size_t>(p)].kind == GrammarElement::Kind::RuleRef; ++p) {
          const int32_t s = g.elements[static_cast<size_t>(p)].rule;
          leading[r].push_back(s);
          if (!nullable[static_cast<size_t>(s)]) break;
        }
    std::vector<int8_t> mark(n, 0);  // 0 unseen, 1 on the path, 2 done
    for (size_t start = 0; start < n; ++start) {
      if (mark[start]) continue;
      std::vector<std::pair<int32_t, size_t>> path = {{static_cast<int32_t>(start), 0}};  // iterative DFS
      mark[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == leading[static_cast<size_t>(r)].size()) {
          mark[static_cast<size_t>(r)] = 2;
          path.pop_back();
          continue;
        }
        const int32_t s = leading[static_cast<size_t>(r)][next++];
        if (mark[static_cast<size_t>(s)] == 1)
          return Status(Error{"grammar: rule '" + g.rule_names[static_cast<size_t>(s)] +
                              "' is left-recursive (it can reach itself before matching a character)"});
        if (mark[static_cast<size_t>(s)] == 0) {
          mark[static_cast<size_t>(s)] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
    return {};
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<CodePointRange> ranges_;
  size_t n_elements_ = 0;
  std::string error_;
};

}  // namespace

Result<Grammar> parse_grammar(std::string_view text, std::string_view root) { return Parser(text).parse(root); }

}  // namespace kestrel
