// A JSON Schema "pattern" (a regular expression, ECMA-262 syntax) as a GBNF expression over the
// characters of a JSON string (between its quotes), so constrained decoding writes only strings the
// pattern matches.
//
// Supported: literal characters, escapes of punctuation, \d \w \s \D \W \S, classes [...] with ranges,
// negation and those escapes, '.', groups ( ) and (?: ), alternation |, quantifiers ? * + {m} {m,}
// {m,n} (a lazy '?' after one changes nothing here), and anchors: ^ at the start, $ at the end. A side
// without its anchor takes any characters (a pattern matches anywhere in the string).
//
// What the grammar writes is a subset of what the pattern matches, never more: a character JSON must
// escape (", \, control characters) is never written, \s writes a space, '.' and negated classes write
// none of those either. Backreferences, lookaround, \b, named groups, flags and Unicode property escapes
// are errors naming the construct.
#pragma once
#include <string>
#include <string_view>

#include "core/status.h"

namespace kestrel {

// The expression refers to the rule `char` (one JSON string character, escapes included) for the free
// sides of an unanchored pattern; the grammar it goes into must define it.
Result<std::string> regex_to_grammar(std::string_view pattern);

}  // namespace kestrel
