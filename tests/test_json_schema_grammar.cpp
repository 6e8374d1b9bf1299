// JSON Schema -> grammar: for a set of schemas of the kinds applications send (nested objects, optional
// properties, enums, arrays with bounds, $ref and recursion, anyOf, formats), texts drawn at random under
// the compiled grammar are complete JSON that python3-jsonschema validates against the schema; schemas
// with keywords that cannot be enforced are refused by name.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "sample/grammar_matcher.h"
#include "sample/integer_range_grammar.h"
#include "sample/json_schema_grammar.h"
#include "grammar_test_support.h"
#include "json_schema_validation.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kSchemas = {
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1}}, "required": ["city"]})",
    R"({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 4})",
    R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "created": {"type": "string", "format": "date-time"},
        "birthday": {"type": "string", "format": "date"}}, "required": ["id", "created", "birthday"]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["value"]}},
        "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"result": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 5}, {"type": "null"},
        {"type": "boolean"}]}, "code": {"const": 200}}, "required": ["result", "code"]})",
    R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": ["integer", "string"]}},
        "additionalProperties": false})",
    R"({"allOf": [{"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
        {"type": "object", "properties": {"y": {"type": "number", "minimum": 0}}, "required": ["y"]}]})",
    R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]}}, "required": ["tags", "point"]})",
    R"({"type": "object", "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "score": {"type": "number", "minimum": 0, "maximum": 1}, "delta": {"type": "integer", "exclusiveMinimum": -40, "exclusiveMaximum": 7},
        "price": {"type": "number", "exclusiveMinimum": 0}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100}},
        "required": ["rating", "score", "delta", "price", "year"]})",
    R"({"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
        "phone": {"type": "string", "pattern": "^\\+?[0-9]{1,3}[ -]?[0-9]{3}[ -]?[0-9]{4}$"}, "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
        "note": {"type": "string", "pattern": "^(urgent|later): .{0,10}$"}}, "required": ["sku", "phone", "slug", "note"]})",
    R"({"type": "object", "properties": {"step": {"type": "string", "enum": ["plan", "act", "done"]},
        "args": {"type": "object", "additionalProperties": {"type": "integer"}}}})",
};

// A character-level vocabulary with some longer tokens (and the end token 0).
std::vector<std::string> walk_vocab() {
  std::vector<std::string> v = {""};
  for (int c = 0x20; c < 0x7F; ++c) v.emplace_back(1, static_cast<char>(c));
  for (const char* t : {"\n", "\": ", "\", \"", "\"}", "true", "false", "null", "\xC3\xA9", "\xC3", "\xA9", "[{\"", "0.5"})
    v.emplace_back(t);
  return v;
}

TEST(JsonSchemaGrammar, RandomTextsUnderTheGrammarValidate) {
  std::string out;
  if (test::run_command("python3 -c 'import jsonschema' 2>&1", out) != 0)
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/setup.sh installs it)";
  const std::vector<std::string> vocab = walk_vocab();
  auto trie = std::make_shared<TokenTrie>(vocab);
  json cases = json::array();
  std::mt19937 rng(11);
  for (const std::string& text : kSchemas) {
    const json schema = json::parse(text);
    auto gbnf = json_schema_to_grammar(schema);
    ASSERT_TRUE(gbnf.ok()) << text << ": " << gbnf.error();
    auto g = parse_grammar(gbnf.value());
    ASSERT_TRUE(g.ok()) << g.error() << "\n" << gbnf.value();
    GrammarConstraint c(std::move(g).value(), trie, {0});
    json samples = json::array();
    for (int i = 0; i < 20; ++i) {
      const std::optional<std::string> sample = test::random_grammar_text(c, vocab, rng, 4000);
      ASSERT_TRUE(sample.has_value()) << "no complete text within 4000 tokens under " << text;
      const json parsed = json::parse(*sample, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << *sample;
      samples.push_back(parsed);
    }
    cases.push_back({{"schema", schema}, {"samples", samples}});
  }
  EXPECT_EQ(test::validate_with_jsonschema(cases, "json-schema", out), 0) << out;
  EXPECT_NE(out.find("checked " + std::to_string(20 * kSchemas.size()) + " invalid 0"), std::string::npos) << out;
}

bool accepts(const std::string& expression, const std::string& text) {
  auto g = parse_grammar("root ::= " + expression + "\n");
  EXPECT_TRUE(g.ok()) << expression;
  return g.ok() && grammar_complete(grammar_advance(*g, grammar_start(*g), text));
}

// Every integer in a window is matched exactly when it lies in [lo, hi]; other spellings never.
TEST(JsonSchemaGrammar, IntegerRangesMatchExactlyTheIntegersWithin) {
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 0},     {0, 9},       {1, 5},    {-5, 3},       {-20, -3},  {7, 7},       {10, 99},  {0, 123},
      {95, 1207}, {-1100, -99}, {-1, 0},   {3, 1000},     {100, 100}, {-999, 999},  {19, 91},  {1900, 2100}};
  for (const auto& [lo, hi] : ranges) {
    const std::string expr = integer_range_grammar(lo, hi);
    auto g = parse_grammar("root ::= " + expr + "\n");
    ASSERT_TRUE(g.ok()) << expr << ": " << g.error();
    for (int64_t x = -1300; x <= 2300; ++x)
      ASSERT_EQ(grammar_complete(grammar_advance(*g, grammar_start(*g), std::to_string(x))), x >= lo && x <= hi)
          << "[" << lo << ", " << hi << "] " << x << " under " << expr;
    for (const char* bad : {"-0", "007", "+5", "05", "1.0", "", "-"}) EXPECT_FALSE(accepts(expr, bad)) << bad << " " << expr;
  }
  const std::string wide = integer_range_grammar(-kMaxGrammarInteger, kMaxGrammarInteger);
  for (const char* ok : {"0", "-9999999999999999", "9999999999999999", "123456789"}) EXPECT_TRUE(accepts(wide, ok)) << ok;
  EXPECT_FALSE(accepts(wide, "99999999999999999"));
}

// Number bounds: the integer part in range, the fraction only where the edge allows it.
TEST(JsonSchemaGrammar, NumberBoundsAcceptOnlyValuesWithin) {
  const auto rule = [](const std::string& schema) {
    auto g = json_schema_to_grammar(json::parse(schema));
    EXPECT_TRUE(g.ok()) << schema << ": " << (g.ok() ? "" : g.error());
    return g.ok() ? *g : std::string();
  };
  const auto accepts_value = [](const std::string& grammar, const std::string& text) {
    auto g = parse_grammar(grammar);
    EXPECT_TRUE(g.ok());
    return g.ok() && grammar_complete(grammar_advance(*g, grammar_start(*g), text));
  };
  const std::string unit = rule(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "0.5", "1", "1.0", "1.000", "0.0001"}) EXPECT_TRUE(accepts_value(unit, ok)) << ok;
  for (const char* bad : {"1.5", "2", "-0.1", "1e1", "1.01", "01"}) EXPECT_FALSE(accepts_value(unit, bad)) << bad;
  const std::string open = rule(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 2})");
  for (const char* ok : {"0.5", "1", "1.99", "0.001"}) EXPECT_TRUE(accepts_value(open, ok)) << ok;
  for (const char* bad : {"0", "0.0", "2", "2.0", "2.5", "-1"}) EXPECT_FALSE(accepts_value(open, bad)) << bad;
  const std::string above = rule(R"({"type": "number", "minimum": 10})");
  for (const char* ok : {"10", "10.5", "123456.25"}) EXPECT_TRUE(accepts_value(above, ok)) << ok;
  for (const char* bad : {"9.99", "9", "-10"}) EXPECT_FALSE(accepts_value(above, bad)) << bad;
}

TEST(JsonSchemaGrammar, UnenforceableKeywordsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "string", "pattern": "(a)\\1"})", "backreferences"},
      {R"({"type": "string", "pattern": "^a+$", "maxLength": 3})", "'pattern' together"},
      {R"({"type": "integer", "minimum": 5, "maximum": 2})", "no integer"},
      {R"({"type": "number", "minimum": 0.5})", "whole numbers"},
      {R"({"type": "number", "maximum": 3})", "lower bound"},
      {R"({"type": "integer", "multipleOf": 3})", "'multipleOf'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"$ref": "https://example.com/s.json"})", "outside the schema"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b' is not among"},
      {R"({"type": "frob"})", "unknown type"},
      {R"({"type": "string", "format": "ipv6"})", "format 'ipv6'"},
      {R"({"enum": []})", "non-empty"},
      {R"(false)", "accepts nothing"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "below"},
  };
  for (const auto& [schema, message] : cases) {
    auto g = json_schema_to_grammar(json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.error().find(message), std::string::npos) << schema << " -> " << g.error();
  }
}

}  // namespace
}  // namespace kestrel
