// JSON Schema -> GBNF (sample/grammar.h), so that constrained decoding emits only JSON that validates.
//
// Supported: type (one or a list); object (properties in their order, required ones always present,
// optional ones may be left out; additionalProperties false, true or a schema, with propertyNames for the
// extra keys; an object without properties takes any keys); array (items, prefixItems, minItems,
// maxItems); string (minLength, maxLength, format date / time / date-time / uuid / email, pattern as
// sample/regex_grammar.h reads it); integer (minimum, maximum, exclusiveMinimum, exclusiveMaximum: exact
// digit-range rules) and number (the same bounds when they are whole numbers of 0 or more, with a lower
// bound: integer-part ranges, and fraction rules at the edges); boolean, null, enum, const, anyOf / oneOf,
// allOf of objects; $ref to "#", "#/$defs/..." and "#/definitions/..." (recursive schemas included);
// true / {} (any JSON). An object with properties and no additionalProperties gets no other keys
// (generation never needs them, and the output still validates).
//
// Anything else that would constrain the value (a pattern outside regex_grammar.h's subset, fractional or
// negative number bounds, multipleOf, uniqueItems, not, if/then/else, dependentRequired, ...) is an error
// naming the keyword, rather than output the schema would reject. Annotations (title, description,
// examples, default, $schema, $id, $comment) are ignored.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace kestrel {

// Properties are generated in the schema's order, so pass the schema as parsed into an ordered_json.
// prefix / suffix: literal text around the value (the value alone, after optional whitespace, when both
// are empty).
Result<std::string> json_schema_to_grammar(const nlohmann::ordered_json& schema, const std::string& prefix = "",
                                           const std::string& suffix = "");

// Any JSON object (object_only), or any object or array: response_format json_object. The same rules
// json_schema_to_grammar builds on ({"type": "object"}).
std::string json_grammar_text(bool object_only);

}  // namespace kestrel
