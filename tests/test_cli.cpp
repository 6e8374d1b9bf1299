// The command line: usage errors are clear and non-zero; subcommands work end to end on a generated model.
#include <cstring>
#include <filesystem>

#include "test_support.h"

namespace kestrel {
namespace {

std::string kestrel_cmd(const std::string& args) { return std::string(KESTREL_BINARY) + " " + args; }

TEST(Cli, UsageErrors) {
  std::string out;
  EXPECT_NE(test::run_command(kestrel_cmd("2>&1"), out), 0);
  EXPECT_NE(test::run_command(kestrel_cmd("generate -p hi 2>&1"), out), 0);
  EXPECT_NE(out.find("--model"), std::string::npos) << out;
  EXPECT_NE(test::run_command(kestrel_cmd("generate -m /nonexistent.gguf -p hi 2>&1"), out), 0);
  EXPECT_NE(out.find("nonexistent"), std::string::npos) << out;
  EXPECT_NE(test::run_command(kestrel_cmd("frobnicate 2>&1"), out), 0);
  EXPECT_NE(test::run_command(kestrel_cmd("make-model -o /tmp/x.gguf --type q9_9 2>&1"), out), 0);
  EXPECT_NE(out.find("q9_9"), std::string::npos) << out;
}

TEST(Cli, MakeModelInfoTokenizeGenerateLogits) {
  const std::string model = test::temp_path("cli.gguf");
  const std::string logits = test::temp_path("cli.logits");
  std::string out;
  ASSERT_EQ(test::run_command(kestrel_cmd("make-model -o " + model + " --type q8_0 --layers 2 2>&1"), out), 0) << out;
  ASSERT_EQ(test::run_command(kestrel_cmd("info -m " + model), out), 0) << out;
  EXPECT_NE(out.find("blk.1.ffn_down.weight"), std::string::npos);
  EXPECT_NE(out.find("Q8_0"), std::string::npos);
  ASSERT_EQ(test::run_command(kestrel_cmd("tokenize -m " + model + " -p 'hello there'"), out), 0);
  EXPECT_EQ(out.substr(0, 2), "1 ");  // BOS first
  ASSERT_EQ(test::run_command(kestrel_cmd("generate -m " + model + " -p 'hello' -n 8 --seed 3 -t 2 2>/dev/null"), out), 0);
  EXPECT_EQ(out.rfind("hello", 0), 0u);
  std::string again;
  test::run_command(kestrel_cmd("generate -m " + model + " -p 'hello' -n 8 --seed 3 -t 1 2>/dev/null"), again);
  EXPECT_EQ(out, again);  // same seed, same text, whatever the thread count
  ASSERT_EQ(test::run_command(kestrel_cmd("logits -m " + model + " -p 'hello there' -o " + logits + " 2>&1"), out), 0);
  const std::string bytes = test::read_file(logits);
  int32_t header[2];
  std::memcpy(header, bytes.data(), 8);
  EXPECT_EQ(bytes.size(), 8 + 4 * static_cast<size_t>(header[0]) * (1 + static_cast<size_t>(header[1])));
  std::filesystem::remove(model);
  std::filesystem::remove(logits);
}

}  // namespace
}  // namespace kestrel
