// The forward pass against llama.cpp's logits for every case in ../shared/reference/manifest.json:
// tokenization of the prompt, then logits for one prefill of the whole prompt and for feeding the tokens
// one at a time through the KV cache, within the tolerances of ../shared/reference/README.md.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "engine/generator.h"
#include "reference_logits_support.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

using test::compare;
using test::Comparison;
using test::expect_within_tolerance;
using test::read_reference;
using test::ReferenceLogits;

TEST(ReferenceLogits, EveryManifestCase) {
  KESTREL_REQUIRE_SHARED(shared);
  const auto manifest = nlohmann::json::parse(test::read_file(shared + "/reference/manifest.json"));
  ThreadPool pool(2);
  int n_checked = 0;
  std::vector<std::string> skipped;
  for (const auto& c : manifest["cases"]) {
    const std::string model_path = shared + "/" + c["model"].get<std::string>();
    const std::string name = c["model"].get<std::string>();
    SCOPED_TRACE(name + " / " + c["prompt"].get<std::string>().substr(0, 20));
    if (!find_arch(c["architecture"].get<std::string>())) {
      skipped.push_back(name + " (architecture " + c["architecture"].get<std::string>() + ")");
      continue;
    }
    auto model = Model::load(model_path);
    ASSERT_TRUE(model.ok()) << model.error();
    auto tokenizer = Tokenizer::from_gguf(model.value()->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
    const auto tokens = tokenizer->encode(c["prompt"].get<std::string>(), c["add_bos"].get<bool>());
    EXPECT_EQ(tokens, c["tokens"].get<std::vector<int32_t>>());

    const ReferenceLogits ref = read_reference(shared + "/" + c["logits"].get<std::string>());
    ASSERT_EQ(ref.tokens, c["tokens"].get<std::vector<int32_t>>());
    ASSERT_EQ(ref.n_vocab, model.value()->hparams().n_vocab);
    const int n = static_cast<int>(ref.tokens.size());

    GeneratorConfig config;
    config.n_ctx = n;
    config.kv_types = KvType::F32;  // as the reference was computed
    Generator prefill(*model.value(), pool, config);
    auto all = prefill.eval(ref.tokens, true);
    ASSERT_TRUE(all.ok()) << all.error();
    expect_within_tolerance(name, compare(ref.logits, all.value(), n, ref.n_vocab), "prefill");

    // Odd page size so positions cross page boundaries mid-prompt.
    config.block_size = 5;
    Generator stepwise(*model.value(), pool, config);
    std::vector<float> rows;
    for (int32_t t : ref.tokens) {
      const int32_t one[1] = {t};
      auto row = stepwise.eval(one, false);
      ASSERT_TRUE(row.ok()) << row.error();
      rows.insert(rows.end(), row->begin(), row->end());
    }
    expect_within_tolerance(name, compare(ref.logits, rows, n, ref.n_vocab), "one-by-one");

    // The 16-bit KV caches round what attention reads: still well inside the quantized-weight bounds.
    // (BF16's coarser rounding can flip an MoE router's top-k choice, so it is held to this on dense
    // models only.)
    if (name.find("f32") != std::string::npos || name.find("stories") != std::string::npos) {
      const bool moe = model.value()->hparams().n_expert > 0;
      for (KvType type : {KvType::F16, KvType::BF16}) {
        if (type == KvType::BF16 && moe) continue;
        GeneratorConfig half = config;
        half.block_size = 16;
        half.kv_types = type;
        Generator g(*model.value(), pool, half);
        auto logits = g.eval(ref.tokens, true);
        ASSERT_TRUE(logits.ok());
        const Comparison c = compare(ref.logits, logits.value(), n, ref.n_vocab);
        EXPECT_LE(c.mean_kl, type == KvType::F16 ? 1e-5 : 1e-4) << name;
        EXPECT_LE(c.max_abs, 0.25) << name;
        std::printf("    %-40s %-10s max|diff| %.3e  mean KL %.3e\n", name.c_str(),
                    type == KvType::F16 ? "f16 cache" : "bf16 cache", c.max_abs, c.mean_kl);
      }
    }
    ++n_checked;
  }
  EXPECT_TRUE(skipped.empty()) << skipped.size() << " cases of unsupported architectures, e.g. " << skipped[0];
  EXPECT_EQ(n_checked, static_cast<int>(manifest["cases"].size()));
}

}  // namespace
}  // namespace kestrel
