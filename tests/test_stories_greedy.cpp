// stories260K, greedy, "Once upon a time", 60 new tokens: the text must equal llama2.c's output.
#include "compute/cpu/isa.h"
#include "engine/generator.h"
#include "test_support.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

TEST(StoriesGreedy, LibraryMatchesLlama2c) {
  KESTREL_REQUIRE_SHARED(shared);
  auto model = Model::load(shared + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.error();
  auto tokenizer = Tokenizer::from_gguf(model.value()->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const std::string prompt = "Once upon a time";
  const auto ids = tokenizer->encode(prompt, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  ThreadPool pool(2);
  Generator generator(*model.value(), pool, GeneratorConfig{});
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  StreamDecoder decoder(*tokenizer);
  std::string text = prompt;
  std::vector<int32_t> generated;
  auto stats = generator.generate(ids, 60, sampler, {tokenizer->vocab().eos}, [&](int32_t t) {
    generated.push_back(t);
    text += decoder.push(t);
    return true;
  });
  ASSERT_TRUE(stats.ok()) << stats.error();
  EXPECT_EQ(stats->n_generated, 60);
  text += decoder.flush() + "\n";
  EXPECT_EQ(text, test::read_file(shared + "/models/stories260K/reference-greedy.txt"));
}

TEST(StoriesGreedy, CommandLineMatchesLlama2cOnEveryIsa) {
  KESTREL_REQUIRE_SHARED(shared);
  // KESTREL_ISA caps the kernels at a level (a CPU without AVX-512, or without AVX2), so each path runs.
  for (Isa isa : runnable_isas()) {
    std::string out;
    const int rc = test::run_command(std::string("KESTREL_ISA=") + isa_name(isa) + " " + KESTREL_BINARY +
                                         " generate -m " + shared +
                                         "/models/stories260K/stories260K.gguf -p 'Once upon a time' -n 60 "
                                         "--temp 0 -t 2 2>/dev/null",
                                     out);
    EXPECT_EQ(rc, 0) << isa_name(isa);
    EXPECT_EQ(out, test::read_file(shared + "/models/stories260K/reference-greedy.txt")) << isa_name(isa);
  }
}

}  // namespace
}  // namespace kestrel
