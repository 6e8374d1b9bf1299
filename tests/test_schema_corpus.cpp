// Structured output on a corpus of real-world JSON Schemas (tests/data/json_schema_corpus.json: tool
// arguments, extraction, records, configs; nested objects, arrays, enums, patterns, formats, numeric
// bounds, $ref, recursion, anyOf/oneOf): 20 samples per schema at temperature 1 from a random-weight model
// with a real 32k vocabulary, through the serving engine as the server runs it. Every output completes
// (finish "stop", never blocked midway) and python3-jsonschema validates it against its schema, while the
// same model unconstrained essentially never writes valid JSON.
//
// A random model closes a free string with probability ~1/n_vocab per token, so the test gives free
// strings, arrays and object keys a length (maxLength 24, maxItems 4, propertyNames maxLength 16, at
// most 12 repetitions for a pattern's * and +) and unrolls recursion through $ref to a fixed depth
// before compiling: a subset of what each schema accepts, and the outputs are validated against the
// originals.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "engine/engine.h"
#include "model/model_maker.h"
#include "sample/json_schema_grammar.h"
#include "server/grammar_cache.h"
#include "json_schema_validation.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;

// A pattern whose unbounded repetitions (* and +) are bounded to 12: a subset of what it matches.
std::string bound_repetitions(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      out += pattern.substr(i++, 2);
      continue;
    }
    if (in_class) in_class = c != ']';
    else if (c == '[') in_class = true;
    if (!in_class && c == '*') out += "{0,12}";
    else if (!in_class && c == '+') out += "{1,12}";
    else out += c;
  }
  return out;
}

// Free strings, arrays and extra keys get a length (see above); everything else is kept.
void bound_lengths(json& schema) {
  if (schema.is_array()) {
    for (json& s : schema) bound_lengths(s);
    return;
  }
  if (!schema.is_object()) return;
  for (auto& [key, value] : schema.items())
    if (key != "enum" && key != "const") bound_lengths(value);
  const auto has_type = [&](const char* t) {
    if (!schema.contains("type")) return false;
    const json& type = schema["type"];
    if (type.is_string()) return type == t;
    for (const json& x : type) if (x == t) return true;
    return false;
  };
  if (schema.contains("pattern") && schema["pattern"].is_string())
    schema["pattern"] = bound_repetitions(schema["pattern"].get<std::string>());
  if (has_type("string") && !schema.contains("maxLength") && !schema.contains("pattern") && !schema.contains("format"))
    schema["maxLength"] = 24;
  if ((has_type("array") || schema.contains("items")) && !schema.contains("maxItems") && !schema.contains("prefixItems"))
    schema["maxItems"] = 4;
  const bool free_keys = has_type("object") && (!schema.contains("properties") || schema.contains("additionalProperties")) &&
                         !(schema.contains("additionalProperties") && schema["additionalProperties"] == false);
  if (free_keys && !schema.contains("propertyNames")) schema["propertyNames"] = {{"maxLength", 16}};
}

// A recursive schema grows a tree whose size, sampled at random, has a long tail (a comment with up to
// two replies, each a comment, ...). Each local $ref is inlined, and an array whose items would nest the
// same definition more than kMaxNesting deep holds no items: a subset again, with a bounded size.
constexpr int kMaxNesting = 3;

void unroll_refs(json& schema, const json& root, std::map<std::string, int>& nesting) {
  if (schema.is_array()) {
    for (json& s : schema) unroll_refs(s, root, nesting);
    return;
  }
  if (!schema.is_object()) return;
  const auto ref_of = [](const json& s) {
    return s.is_object() && s.contains("$ref") && s["$ref"].is_string() ? s["$ref"].get<std::string>() : std::string();
  };
  if (schema.contains("items")) {
    const std::string ref = ref_of(schema["items"]);
    if (!ref.empty() && nesting[ref] >= kMaxNesting) {
      schema.erase("items");
      schema["maxItems"] = 0;
    }
  }
  const std::string ref = ref_of(schema);
  if (ref.rfind("#/", 0) == 0) {
    schema.erase("$ref");
    for (const auto& [key, value] : root.at(json::json_pointer(ref.substr(1))).items())
      if (!schema.contains(key)) schema[key] = value;
    ++nesting[ref];
    unroll_refs(schema, root, nesting);
    --nesting[ref];
    return;
  }
  for (auto& [key, value] : schema.items())
    if (key != "$defs" && key != "definitions" && key != "enum" && key != "const") unroll_refs(value, root, nesting);
}

TEST(SchemaCorpus, EveryOutputOfARandomModelValidatesUnderItsSchema) {
  const std::string shared = test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
  std::string out;
  if (test::run_command("python3 -c 'import jsonschema' 2>&1", out) != 0)
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/setup.sh installs it)";
  const json corpus = json::parse(test::read_file(std::string(KESTREL_SOURCE_DIR) + "/tests/data/json_schema_corpus.json"));
  ASSERT_GE(corpus.size(), 30u);

  MakeModelOptions options;
  options.shape.n_embd = 64;
  options.shape.n_layers = 1;
  options.shape.n_heads = 4;
  options.shape.n_kv_heads = 2;
  options.shape.n_ff = 128;
  options.shape.n_vocab = 32000;
  options.weight_type = "q8_0";
  options.vocab_from = shared + "/tokenizer-tests/ggml-vocab-llama-spm.gguf";
  const std::string path = test::temp_path("schema-corpus.gguf");
  ASSERT_TRUE(make_model(options, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error();
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  GrammarCache grammars(*tokenizer);
  ThreadPool pool(2);
  EngineConfig config;
  config.n_blocks = 2048;
  Engine engine(**model, pool, config);
  const std::vector<int32_t> prompt = tokenizer->encode("Reply in JSON:", true);
  constexpr int kSamples = test::kSanitizerBuild ? 5 : 20;  // every schema either way; fewer texts under ASan

  // Runs kSamples requests at once (batched as the server batches them); the texts, and whether each
  // finished by "stop".
  auto sample = [&](const std::shared_ptr<const GrammarConstraint>& grammar, int32_t max_tokens, uint64_t seed) {
    std::vector<int64_t> ids;
    for (int i = 0; i < kSamples; ++i) {
      Request r;
      r.prompt = prompt;
      r.max_tokens = max_tokens;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed + static_cast<uint64_t>(i);
      r.sampling.grammar = grammar;
      for (int32_t id : {tokenizer->vocab().eos, tokenizer->vocab().eot})
        if (id >= 0) r.stop_tokens.push_back(id);
      ids.push_back(engine.add_request(std::move(r)).value());
    }
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::map<int64_t, FinishReason> finish;
    while (engine.has_work())
      for (const StepOutput& o : engine.step()) {
        for (const GeneratedToken& t : o.tokens) tokens[o.request_id].push_back(t.token);
        if (o.finish != FinishReason::None) finish[o.request_id] = o.finish;
      }
    std::vector<std::pair<std::string, bool>> texts;
    for (int64_t id : ids) texts.emplace_back(tokenizer->decode(tokens[id]), finish[id] == FinishReason::Stop);
    return texts;
  };

  json cases = json::array();
  size_t n_texts = 0;
  for (const json& entry : corpus) {
    const std::string name = entry["name"].get<std::string>();
    json bounded = entry["schema"];
    std::map<std::string, int> nesting;
    unroll_refs(bounded, entry["schema"], nesting);
    bound_lengths(bounded);
    auto gbnf = json_schema_to_grammar(bounded);
    ASSERT_TRUE(gbnf.ok()) << name << ": " << gbnf.error();
    auto grammar = grammars.get(*gbnf);
    ASSERT_TRUE(grammar.ok()) << name << ": " << grammar.error();
    json samples = json::array();
    for (const auto& [text, stopped] : sample(*grammar, 3000, 17 + 1000 * n_texts)) {
      EXPECT_TRUE(stopped) << name << ": did not complete: " << text.substr(0, 300);
      const json parsed = json::parse(text, nullptr, false);
      EXPECT_FALSE(parsed.is_discarded()) << name << ": not JSON: " << text.substr(0, 300);
      if (!parsed.is_discarded()) samples.push_back(parsed);
      ++n_texts;
    }
    cases.push_back({{"name", name}, {"schema", entry["schema"]}, {"samples", samples}});
  }
  // Unconstrained, the same model at the same temperature writes no valid JSON object.
  int valid_unconstrained = 0;
  for (const auto& [text, stopped] : sample(nullptr, 64, 3)) {
    const json parsed = json::parse(text, nullptr, false);
    valid_unconstrained += !parsed.is_discarded() && parsed.is_object();
  }
  EXPECT_EQ(valid_unconstrained, 0);

  EXPECT_EQ(test::validate_with_jsonschema(cases, "schema-corpus", out), 0) << out;
  EXPECT_NE(out.find("checked " + std::to_string(n_texts) + " invalid 0"), std::string::npos) << out;
  EXPECT_EQ(n_texts, corpus.size() * kSamples);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kestrel
