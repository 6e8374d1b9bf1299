#include "sample/integer_range_grammar.h"

#include <stdexcept>
#include <vector>

namespace kestrel {
namespace {

std::string digit_class(char a, char b) {
  if (a == b) return std::string("\"") + a + "\"";
  return std::string("[") + a + "-" + b + "]";
}

std::string any_digits(size_t n) { return n == 0 ? "" : n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}"; }

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts)
    if (!p.empty()) out += (out.empty() ? "" : sep) + p;
  return out;
}

// Digit strings of the same length between a and b (a <= b), as a sequence expression (alternatives in
// parentheses).
std::string same_length(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  size_t p = 0;
  while (p < n && a[p] == b[p]) ++p;
  std::string prefix;
  if (p) {
    prefix = '"';
    prefix.append(a, 0, p);
    prefix += '"';
  }
  if (p == n) return prefix;
  const size_t m = n - p - 1;  // digits after the first that differs
  const std::string a_rest = a.substr(p + 1), b_rest = b.substr(p + 1);
  const bool a_low = a_rest.find_first_not_of('0') == std::string::npos;  // a's rest is all zeros
  const bool b_high = b_rest.find_first_not_of('9') == std::string::npos;  // b's rest is all nines
  const char lo = a_low ? a[p] : static_cast<char>(a[p] + 1), hi = b_high ? b[p] : static_cast<char>(b[p] - 1);
  std::vector<std::string> alts;
  if (!a_low) alts.push_back(join({digit_class(a[p], a[p]), same_length(a_rest, std::string(m, '9'))}, " "));
  if (lo <= hi) alts.push_back(join({digit_class(lo, hi), any_digits(m)}, " "));
  if (!b_high) alts.push_back(join({digit_class(b[p], b[p]), same_length(std::string(m, '0'), b_rest)}, " "));
  const std::string rest = alts.size() == 1 ? alts[0] : "( " + join(alts, " | ") + " )";
  return join({prefix, rest}, " ");
}

// Non-negative integers in [a, b].
std::string non_negative(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  std::string sa = std::to_string(a);
  const std::string sb = std::to_string(b);
  while (sa.size() < sb.size()) {  // the rest of a's length, then each longer length in full
    alts.push_back(same_length(sa, std::string(sa.size(), '9')));
    sa.assign(sa.size() + 1, '0');
    sa[0] = '1';
  }
  alts.push_back(same_length(sa, sb));
  return alts.size() == 1 ? alts[0] : "( " + join(alts, " | ") + " )";
}

}  // namespace

std::string integer_range_grammar(int64_t lo, int64_t hi) {
  if (lo > hi || lo < -kMaxGrammarInteger || hi > kMaxGrammarInteger) throw std::invalid_argument("integer_range_grammar: bad range");
  std::vector<std::string> alts;
  if (lo < 0) alts.push_back("\"-\" " + non_negative(hi < 0 ? -hi : 1, -lo));
  if (hi >= 0) alts.push_back(non_negative(lo > 0 ? lo : 0, hi));
  return alts.size() == 1 ? "( " + alts[0] + " )" : "( " + join(alts, " | ") + " )";
}

}  // namespace kestrel
