// Tool calling: the formats of three template families are detected from the real templates in
// ../shared, calls are read from replies in each format (and plain text stays content), a forced call's
// grammar admits exactly calls of the declared functions with valid arguments, and the templates render
// tools, past calls and tool results.
#include <nlohmann/json.hpp>

#include <random>

#include "sample/grammar.h"
#include "sample/grammar_constraint.h"
#include "sample/grammar_matcher.h"
#include "server/tool_calls.h"
#include "grammar_test_support.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"

namespace kestrel {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                  "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
])");

TEST(ToolCalls, FormatsAreDetectedFromTheRealTemplates) {
  const std::string shared = test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
  const std::string dir = shared + "/chat-templates/";
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "Qwen-Qwen2.5-7B-Instruct.jinja")), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "meta-llama-Llama-3.1-8B-Instruct.jinja")), ToolCallFormat::Llama3);
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "meta-llama-Llama-3.2-3B-Instruct.jinja")), ToolCallFormat::Llama3);
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "mistralai-Mistral-Nemo-Instruct-2407.jinja")), ToolCallFormat::Mistral);
  EXPECT_EQ(detect_tool_call_format(test::read_file(dir + "google-gemma-2-2b-it.jinja")), ToolCallFormat::None);
}

TEST(ToolCalls, CallsAreReadInEachFormatAndOtherTextIsContent) {
  auto hermes = parse_tool_calls(ToolCallFormat::Hermes,
                                 "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                                 "<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}</tool_call>",
                                 kTools, 1);
  ASSERT_EQ(hermes.calls.size(), 2u);
  EXPECT_EQ(hermes.content, "Let me check.");
  EXPECT_EQ(hermes.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(hermes.calls[0].arguments), json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(json::parse(hermes.calls[1].arguments), json::parse(R"({"a": 1, "b": 2})"));
  EXPECT_EQ(hermes.calls[0].id.size(), 9u);
  EXPECT_NE(hermes.calls[0].id, hermes.calls[1].id);
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Hermes, "x <tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>", kTools, 1).calls[0].id,
            parse_tool_calls(ToolCallFormat::Hermes, "y <tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>", kTools, 1).calls[0].id);

  auto llama = parse_tool_calls(ToolCallFormat::Llama3, " <|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}", kTools, 2);
  ASSERT_EQ(llama.calls.size(), 1u);
  EXPECT_EQ(llama.calls[0].name, "add");
  EXPECT_EQ(llama.content, "");
  auto mistral = parse_tool_calls(ToolCallFormat::Mistral, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]", kTools, 3);
  ASSERT_EQ(mistral.calls.size(), 1u);
  EXPECT_EQ(json::parse(mistral.calls[0].arguments)["city"], "Oslo");

  // Not calls: plain text, unknown functions, broken JSON, unclosed blocks.
  for (const auto& [format, text] : std::vector<std::pair<ToolCallFormat, std::string>>{
           {ToolCallFormat::Hermes, "Once upon a time"},
           {ToolCallFormat::Hermes, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>"},
           {ToolCallFormat::Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": {</tool_call>"},
           {ToolCallFormat::Hermes, "<tool_call>{\"name\": \"add\", \"arguments\": {}}"},
           {ToolCallFormat::Llama3, "{\"name\": \"add\"} and more"},
           {ToolCallFormat::Mistral, "[1, 2]"},
           {ToolCallFormat::None, "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>"}}) {
    const ParsedReply r = parse_tool_calls(format, text, kTools, 4);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCalls, ToolsAreValidated) {
  EXPECT_TRUE(validate_tools(kTools).ok());
  for (const char* bad : {R"({})", R"([{"type": "web"}])", R"([{"type": "function", "function": {"name": ""}}])",
                          R"([{"type": "function", "function": {"name": "a b"}}])",
                          R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
                          R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])"})
    EXPECT_FALSE(validate_tools(json::parse(bad)).ok()) << bad;
}

// Random texts under a forced call's grammar (character-level vocabulary) are calls of a declared function
// whose arguments have the required keys and types, in every format.
TEST(ToolCalls, AForcedCallsGrammarAdmitsOnlyValidCalls) {
  std::vector<std::string> vocab = {""};
  for (int c = 0x20; c < 0x7F; ++c) vocab.emplace_back(1, static_cast<char>(c));
  for (const char* t : {"\n", "<tool_call>", "</tool_call>", "\": ", "get_weather", "celsius"}) vocab.emplace_back(t);
  auto trie = std::make_shared<TokenTrie>(vocab);
  std::mt19937 rng(5);
  for (ToolCallFormat format : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral}) {
    for (const std::string only : {"", "add"}) {
      auto gbnf = tool_call_grammar(format, kTools, only);
      ASSERT_TRUE(gbnf.ok()) << gbnf.error();
      auto g = parse_grammar(gbnf.value());
      ASSERT_TRUE(g.ok()) << g.error() << "\n" << gbnf.value();
      GrammarConstraint c(std::move(g).value(), trie, {0});
      for (int sample = 0; sample < 10; ++sample) {
        const std::optional<std::string> drawn = test::random_grammar_text(c, vocab, rng, 3000);
        ASSERT_TRUE(drawn.has_value()) << tool_call_format_name(format) << ": no complete call within 3000 tokens";
        const std::string& text = *drawn;
        const ParsedReply r = parse_tool_calls(format, text, kTools, 9);
        ASSERT_EQ(r.calls.size(), 1u) << tool_call_format_name(format) << ": " << text;
        if (!only.empty()) {
          EXPECT_EQ(r.calls[0].name, only);
        }
        const json args = json::parse(r.calls[0].arguments);
        if (r.calls[0].name == "add") {
          EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << text;
        } else {
          EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 12) << text;
        }
      }
    }
  }
  EXPECT_FALSE(tool_call_grammar(ToolCallFormat::Hermes, kTools, "nope").ok());
  EXPECT_FALSE(tool_call_grammar(ToolCallFormat::None, kTools, "").ok());
}

// The templates render the tools, an assistant's past call (arguments given as JSON text) and the tool's
// result in their own formats.
TEST(ToolCalls, TemplatesRenderToolsCallsAndResults) {
  const std::string shared = test::shared_dir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
  struct Case { const char* file; const char* call_marker; };
  for (const Case& tc : {Case{"Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>"},
                         Case{"meta-llama-Llama-3.1-8B-Instruct.jinja", "\"parameters\": "},
                         Case{"mistralai-Mistral-Nemo-Instruct-2407.jinja", "[TOOL_CALLS]"}}) {
    auto t = ChatTemplate::parse(test::read_file(shared + "/chat-templates/" + tc.file));
    ASSERT_TRUE(t.ok()) << t.error();
    ChatMessage call{"assistant", ""};
    call.tool_calls = json::parse(R"([{"id": "abcDEF123", "type": "function",
                                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}])");
    ChatMessage result{"tool", "{\"temperature\": 21}"};
    result.tool_call_id = "abcDEF123";
    result.name = "get_weather";
    const std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}, call, result};
    auto text = t->render(messages, true, "<s>", "</s>", kTools);
    ASSERT_TRUE(text.ok()) << tc.file << ": " << text.error();
    EXPECT_NE(text->find("get_weather"), std::string::npos) << tc.file;
    EXPECT_NE(text->find("Paris"), std::string::npos) << tc.file;
    EXPECT_NE(text->find(tc.call_marker), std::string::npos) << tc.file << "\n" << *text;
    EXPECT_NE(text->find("21"), std::string::npos) << tc.file;
    EXPECT_EQ(text->find("{\\\"city"), std::string::npos) << tc.file << ": arguments printed as a string\n" << *text;
  }
}

}  // namespace
}  // namespace kestrel
