#include "sample/json_schema_grammar.h"

#include "sample/integer_range_grammar.h"
#include "sample/regex_grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <map>
#include <set>
#include <vector>

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;

// The building blocks every compiled schema may use.
const char* kPrimitives = R"(ws ::= ( " " | "\n" [ \t]{0,16} )?
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
string ::= "\"" char* "\""
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
date ::= [1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( day30 | "31" ) | ( "0" [469] | "11" ) "-" day30 | "02-" day28 )
day28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
day30 ::= day28 | "29" | "30"
time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
email ::= [A-Za-z0-9._%+-]{1,32} "@" [A-Za-z0-9] [A-Za-z0-9-]{0,23} ( "." [A-Za-z]{2,8} ){1,2}
uuid ::= [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}
)";

// A GBNF string literal of these bytes.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  Result<std::string> compile(const std::string& prefix, const std::string& suffix) {
    const std::string top = visit(root_, "root-value");
    if (!error_.empty()) return Error{error_};
    const std::string around = prefix.empty() && suffix.empty() ? "ws " + top
                               : (prefix.empty() ? "" : literal(prefix) + " ") + top + (suffix.empty() ? "" : " " + literal(suffix));
    std::string text = "root ::= " + around + "\n" + kPrimitives;
    for (const auto& [name, body] : rules_) text += name + " ::= " + body + "\n";
    return text;
  }

 private:
  void fail(const std::string& message) {
    if (error_.empty()) error_ = "json schema: " + message;
  }

  // A fresh rule name based on hint.
  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (base.empty()) base = "r";
    std::string name = "s-" + base;
    for (int i = 2; rules_.count(name); ++i) name = "s-" + base + "-" + std::to_string(i);
    rules_[name] = body;
    return name;
  }

  // A grammar expression (a rule name or a parenthesised expression) for values the schema accepts.
  std::string visit(const json& schema, const std::string& hint) {
    if (!error_.empty()) return "value";
    if (++depth_ > 64) {
      fail("nested more than 64 levels deep (outside $ref)");
      return "value";
    }
    std::string out = visit_inner(schema, hint);
    --depth_;
    return out;
  }

  std::string visit_inner(const json& schema, const std::string& hint) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail("the schema false accepts nothing");
      return "value";
    }
    if (!schema.is_object()) {
      fail("a schema must be an object or a boolean");
      return "value";
    }
    static const std::set<std::string> kIgnored = {"title", "description", "examples", "default", "$schema", "$id",
                                                   "$comment", "$defs", "definitions", "readOnly", "writeOnly",
                                                   "deprecated", "nullable", "strict", "name"};
    static const std::set<std::string> kKnown = {"type", "properties", "required", "additionalProperties", "items",
                                                 "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                                 "format", "pattern", "minimum", "exclusiveMinimum", "maximum",
                                                 "exclusiveMaximum", "propertyNames", "enum", "const", "anyOf",
                                                 "oneOf", "allOf", "$ref"};
    for (const auto& [key, v] : schema.items())
      if (!kIgnored.count(key) && !kKnown.count(key)) {
        fail("'" + key + "' is not supported");
        return "value";
      }
    if (schema.contains("$ref")) return ref(schema["$ref"], hint);
    if (schema.contains("const")) return literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const json& e = schema["enum"];
      if (!e.is_array() || e.empty()) {
        fail("'enum' must be a non-empty array");
        return "value";
      }
      std::string alts;
      for (const json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (schema.contains(key)) {
        const json& list = schema[key];
        if (!list.is_array() || list.empty()) {
          fail(std::string("'") + key + "' must be a non-empty array");
          return "value";
        }
        std::string alts;
        for (size_t i = 0; i < list.size(); ++i)
          alts += (alts.empty() ? "" : " | ") + visit(list[i], hint + "-" + std::to_string(i));
        return "(" + alts + ")";
      }
    if (schema.contains("allOf")) return all_of(schema, hint);
    if (schema.contains("type") && schema["type"].is_array()) {
      std::string alts;
      for (const json& t : schema["type"]) {
        json one = schema;
        one["type"] = t;
        alts += (alts.empty() ? "" : " | ") + visit(one, hint);
      }
      return alts.empty() ? "value" : "(" + alts + ")";
    }
    const std::string type = schema.contains("type") && schema["type"].is_string() ? schema["type"].get<std::string>()
                             : schema.contains("properties")                       ? "object"
                             : schema.contains("items") || schema.contains("prefixItems") ? "array"
                                                                                         : "";
    if (type.empty()) return "value";
    if (type == "object") return object(schema, hint);
    if (type == "array") return array(schema, hint);
    if (type == "string") return string(schema, hint);
    if (type == "integer" || type == "number") return number(schema, type, hint);
    if (type == "boolean") return "boolean";
    if (type == "null") return "null";
    fail("unknown type '" + type + "'");
    return "value";
  }

  std::string ref(const json& target, const std::string& hint) {
    if (!target.is_string()) {
      fail("'$ref' must be a string");
      return "value";
    }
    const std::string path = target.get<std::string>();
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    if (path != "#" && path.rfind("#/", 0) != 0) {
      fail("'$ref' " + path + " points outside the schema (only '#...' references are supported)");
      return "value";
    }
    const json* node = &root_;
    if (path != "#") {
      try {
        node = &root_.at(json::json_pointer(path.substr(1)));
      } catch (const std::exception&) {
        fail("'$ref' " + path + " does not resolve");
        return "value";
      }
    }
    // Named before its body is compiled, so a recursive reference finds it.
    const std::string name = new_rule(path == "#" ? "root" : path.substr(path.rfind('/') + 1), "value");
    refs_[path] = name;
    rules_[name] = visit(*node, hint);
    return name;
  }

  std::string all_of(const json& schema, const std::string& hint) {
    // Objects only: the union of properties and required lists (what allOf composition is used for).
    json merged = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    std::vector<const json*> parts;
    for (const json& part : schema["allOf"]) parts.push_back(&part);
    for (size_t i = 0; i < parts.size(); ++i) {
      const json* part = parts[i];
      if (part->is_object() && part->contains("$ref") && (*part)["$ref"].is_string()) {
        try {
          part = &root_.at(json::json_pointer((*part)["$ref"].get<std::string>().substr(1)));
        } catch (const std::exception&) {
          fail("'$ref' in allOf does not resolve");
          return "value";
        }
      }
      if (!part->is_object() || (part->contains("type") && (*part)["type"] != "object")) {
        fail("'allOf' is supported for objects only");
        return "value";
      }
      if (part->contains("properties")) merged["properties"].update((*part)["properties"]);
      if (part->contains("required"))
        for (const json& r : (*part)["required"]) merged["required"].push_back(r);
      if (part->contains("additionalProperties")) merged["additionalProperties"] = (*part)["additionalProperties"];
    }
    return object(merged, hint);
  }

  std::string object(const json& schema, const std::string& hint) {
    const json props = schema.value("properties", json::object());
    if (!props.is_object()) {
      fail("'properties' must be an object");
      return "value";
    }
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) {
        fail("'required' must be an array");
        return "value";
      }
      for (const json& r : schema["required"])
        if (r.is_string()) required.insert(r.get<std::string>());
    }
    for (const std::string& r : required)
      if (!props.contains(r)) {
        fail("required property '" + r + "' is not among the properties");
        return "value";
      }
    const json extra = schema.contains("additionalProperties") ? schema["additionalProperties"]
                       : props.empty()                        ? json(true)
                                                              : json(false);
    std::vector<std::pair<std::string, bool>> items;  // (key-value expression, required)
    for (const auto& [key, sub] : props.items())
      items.emplace_back(literal(json(key).dump()) + " ws \":\" ws " + visit(sub, hint + "-" + key), required.count(key) > 0);
    std::string extra_kv;
    if (!(extra.is_boolean() && !extra.get<bool>())) {
      const std::string v = extra.is_boolean() ? "value" : visit(extra, hint + "-additional");
      // Keys as propertyNames says (a string schema: maxLength, pattern, enum, ...), else any string.
      std::string key = "string";
      if (schema.contains("propertyNames")) {
        json names = schema["propertyNames"];
        if (names.is_object() && !names.contains("type") && !names.contains("enum") && !names.contains("const")) names["type"] = "string";
        key = visit(names, hint + "-key");
      }
      extra_kv = new_rule(hint + "-kv", key + " ws \":\" ws " + v);
    }
    // rest(i, first): the properties from i on, "first" when nothing was written yet (no comma before).
    // Required ones always appear; optional ones may be left out; extra keys may follow at the end.
    std::vector<std::string> rest_first(items.size() + 1), rest_more(items.size() + 1);
    const std::string tail_more = extra_kv.empty() ? "" : "( \",\" ws " + extra_kv + " ws )*";
    const std::string tail_first = extra_kv.empty() ? "" : "( " + extra_kv + " ws " + tail_more + " )?";
    rest_first[items.size()] = tail_first;
    rest_more[items.size()] = tail_more;
    for (size_t i = items.size(); i-- > 0;) {
      const auto& [kv, req] = items[i];
      const std::string next_more = rest_more[i + 1].empty() ? "" : " " + rest_more[i + 1];
      const std::string with_first = kv + " ws" + next_more;
      const std::string with_more = "\",\" ws " + kv + " ws" + next_more;
      auto name = [&](const std::string& body, const char* which) {
        return body.empty() ? std::string() : new_rule(hint + "-" + std::to_string(i) + which, body);
      };
      if (req) {
        rest_first[i] = name(with_first, "-f");
        rest_more[i] = name(with_more, "-m");
      } else {
        const std::string skip_first = rest_first[i + 1], skip_more = rest_more[i + 1];
        rest_first[i] = name("( " + with_first + " )" + (skip_first.empty() ? " | \"\"" : " | " + skip_first), "-f");
        rest_more[i] = name("( " + with_more + " )" + (skip_more.empty() ? " | \"\"" : " | " + skip_more), "-m");
      }
    }
    return new_rule(hint, "\"{\" ws " + (rest_first[0].empty() ? std::string() : rest_first[0] + " ") + "\"}\"");
  }

  // The integer keyword's value in [0, most], or fallback when absent (or, after an error, invalid).
  int64_t bound(const json& schema, const char* key, int64_t fallback, int64_t most) {
    if (!schema.contains(key)) return fallback;
    if (!schema[key].is_number_integer() || schema[key].get<int64_t>() < 0 || schema[key].get<int64_t>() > most) {
      fail(std::string("'") + key + "' must be an integer in [0, " + std::to_string(most) + "]");
      return fallback;
    }
    return schema[key].get<int64_t>();
  }

  std::string array(const json& schema, const std::string& hint) {
    if (schema.contains("prefixItems")) {
      const json& tuple = schema["prefixItems"];
      if (!tuple.is_array()) {
        fail("'prefixItems' must be an array");
        return "value";
      }
      std::string body = "\"[\" ws";
      for (size_t i = 0; i < tuple.size(); ++i)
        body += (i ? " \",\" ws " : " ") + visit(tuple[i], hint + "-" + std::to_string(i)) + " ws";
      return new_rule(hint, body + " \"]\"");
    }
    const std::string item = schema.contains("items") ? visit(schema["items"], hint + "-item") : "value";
    const int64_t min = bound(schema, "minItems", 0, 1000), max = bound(schema, "maxItems", -1, 1000);
    if (max >= 0 && max < min) fail("'maxItems' is below 'minItems'");
    // item (, item){min-1, max-1}, or nothing when min is 0.
    std::string more = "( \",\" ws " + item + " ws )";
    if (max < 0) more += min > 1 ? "{" + std::to_string(min - 1) + ",}" : "*";
    else if (max > 0) more += "{" + std::to_string(std::max<int64_t>(min - 1, 0)) + "," + std::to_string(max - 1) + "}";
    std::string list = max == 0 ? "" : item + " ws " + more;
    if (min == 0 && !list.empty()) list = "( " + list + " )?";
    return new_rule(hint, "\"[\" ws " + (list.empty() ? std::string() : list + " ") + "\"]\"");
  }

  std::string string(const json& schema, const std::string& hint) {
    if (schema.contains("format")) {
      const std::string f = schema["format"].is_string() ? schema["format"].get<std::string>() : "";
      if (f == "date") return "\"\\\"\" date \"\\\"\"";
      if (f == "time") return "\"\\\"\" time \"\\\"\"";
      if (f == "date-time") return "\"\\\"\" date \"T\" time \"\\\"\"";
      if (f == "uuid") return "\"\\\"\" uuid \"\\\"\"";
      if (f == "email") return "\"\\\"\" email \"\\\"\"";
      if (f != "uri" && f != "hostname") {  // annotations a plain string satisfies
        fail("string format '" + f + "' is not supported");
        return "value";
      }
    }
    if (schema.contains("pattern")) {
      if (schema.contains("format") || schema.contains("minLength") || schema.contains("maxLength"))
        return fail("'pattern' together with format, minLength or maxLength is not supported"), "value";
      auto expr = schema["pattern"].is_string() ? regex_to_grammar(schema["pattern"].get<std::string>())
                                                : Result<std::string>(Error{"'pattern' must be a string"});
      if (!expr.ok()) return fail(expr.error()), "value";
      return new_rule(hint, "\"\\\"\" " + *expr + " \"\\\"\"");
    }
    if (!schema.contains("minLength") && !schema.contains("maxLength")) return "string";
    const int64_t min = bound(schema, "minLength", 0, 4096), max = bound(schema, "maxLength", -1, 4096);
    if (max >= 0 && max < min) fail("'maxLength' is below 'minLength'");
    const std::string reps = max < 0 ? "{" + std::to_string(min) + ",}" : "{" + std::to_string(min) + "," + std::to_string(max) + "}";
    return new_rule(hint, "\"\\\"\" char" + reps + " \"\\\"\"");
  }

  // A numeric bound keyword as a number; nullopt when absent (or, after an error, invalid).
  std::optional<double> numeric(const json& schema, const char* key) {
    if (!schema.contains(key)) return std::nullopt;
    const json& v = schema[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || std::abs(v.get<double>()) > static_cast<double>(kMaxGrammarInteger)) {
      fail(std::string("'") + key + "' must be a number of at most 16 digits");
      return std::nullopt;
    }
    return v.get<double>();
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum, exactly: integers by a digit-range rule;
  // numbers with whole bounds of 0 or more by ranges of their integer part and rules for the fraction at
  // the edges (no exponent). multipleOf is refused (the kKnown list).
  std::string number(const json& schema, const std::string& type, const std::string& hint) {
    const auto min = numeric(schema, "minimum"), max = numeric(schema, "maximum");
    const auto xmin = numeric(schema, "exclusiveMinimum"), xmax = numeric(schema, "exclusiveMaximum");
    if (!error_.empty()) return "value";
    if (!min && !max && !xmin && !xmax) return type;
    if (type == "integer") {
      int64_t lo = -kMaxGrammarInteger, hi = kMaxGrammarInteger;
      if (min) lo = std::max(lo, static_cast<int64_t>(std::ceil(*min)));
      if (xmin) lo = std::max(lo, static_cast<int64_t>(std::floor(*xmin)) + 1);
      if (max) hi = std::min(hi, static_cast<int64_t>(std::floor(*max)));
      if (xmax) hi = std::min(hi, static_cast<int64_t>(std::ceil(*xmax)) - 1);
      if (lo > hi) return fail("no integer lies within the bounds"), "value";
      return new_rule(hint, integer_range_grammar(lo, hi));
    }
    // Numbers: the integer part in a range with any fraction, and the edges by their fraction.
    const auto whole = [](const std::optional<double>& b) { return !b || (*b >= 0 && *b == std::floor(*b)); };
    if (!whole(min) || !whole(max) || !whole(xmin) || !whole(xmax) || (!min && !xmin))
      return fail("number bounds must be whole numbers of 0 or more, with a lower bound (integers take any)"), "value";
    if ((min && xmin) || (max && xmax)) return fail("give a bound as minimum or exclusiveMinimum, not both"), "value";
    const int64_t lo = static_cast<int64_t>(min ? *min : *xmin);
    const bool lo_open = xmin.has_value();
    const std::optional<int64_t> hi = max ? std::optional<int64_t>(static_cast<int64_t>(*max))
                                    : xmax ? std::optional<int64_t>(static_cast<int64_t>(*xmax)) : std::nullopt;
    const bool hi_open = xmax.has_value();
    const std::string any_fraction = "( \".\" [0-9]{1,16} )?", nonzero_fraction = "\".\" [0-9]{0,15} [1-9]",
                      zero_fraction = "( \".\" \"0\"{1,16} )?";
    std::vector<std::string> alts;
    const int64_t first_any = lo_open ? lo + 1 : lo;                   // integer parts with any fraction
    const int64_t last_any = hi ? *hi - 1 : kMaxGrammarInteger;
    if (first_any <= last_any) alts.push_back(integer_range_grammar(first_any, last_any) + " " + any_fraction);
    if (lo_open && (!hi || lo < *hi)) alts.push_back("\"" + std::to_string(lo) + "\" " + nonzero_fraction);
    if (hi && !hi_open && *hi >= first_any) alts.push_back("\"" + std::to_string(*hi) + "\" " + zero_fraction);
    if (alts.empty()) return fail("no number lies within the bounds"), "value";
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
    return new_rule(hint, body);
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;  // "$ref" path -> rule
  std::string error_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_grammar(const json& schema, const std::string& prefix, const std::string& suffix) {
  return SchemaCompiler(schema).compile(prefix, suffix);
}

std::string json_grammar_text(bool object_only) {
  const json schema = object_only ? json{{"type", "object"}} : json{{"type", json::array({"object", "array"})}};
  return json_schema_to_grammar(schema).value();
}

}  // namespace kestrel
