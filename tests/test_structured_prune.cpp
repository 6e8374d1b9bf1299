// Structured pruning (quant/structured_prune.h, model/structured_pruner.h) and the per-layer shapes it
// writes: hparams arrays, weights, attention and KV pages sized per layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "engine/generator.h"
#include "io/gguf.h"
#include "model/arch.h"
#include "model/calibration.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "model/model_pruner.h"
#include "model/structured_pruner.h"
#include "quant/structured_prune.h"
#include "test_support.h"

namespace kestrel {
namespace {

std::vector<PruneUnit> units(std::initializer_list<double> costs, int64_t size = 1) {
  std::vector<PruneUnit> u;
  for (double c : costs) u.push_back({c, size});
  return u;
}

TEST(StructuredPrune, PerLayerBudgetTakesTheSameShareOfEveryLayer) {
  const std::vector<std::vector<PruneUnit>> layers{units({1, 2, 3, 4}), units({10, 20, 30, 40})};
  EXPECT_EQ(units_to_remove(layers, 0.25, PruneBudget::PerLayer), (std::vector<int>{1, 1}));
  EXPECT_EQ(units_to_remove(layers, 0.5, PruneBudget::PerLayer), (std::vector<int>{2, 2}));
  EXPECT_EQ(units_to_remove(layers, 0.0, PruneBudget::PerLayer), (std::vector<int>{0, 0}));
  // 0.1 of 4 units is nearer none than one.
  EXPECT_EQ(units_to_remove(layers, 0.1, PruneBudget::PerLayer), (std::vector<int>{0, 0}));
  // The last unit of a layer stays.
  EXPECT_EQ(units_to_remove(layers, 0.99, PruneBudget::PerLayer), (std::vector<int>{3, 3}));
}

TEST(StructuredPrune, GlobalBudgetTakesTheCheapestUnitsAnywhere) {
  // Costs count as shares of their layer's total: 0.1 0.1 0.1 0.7 and 0.1 0.2 0.3 0.4.
  const std::vector<std::vector<PruneUnit>> layers{units({1, 1, 1, 7}), units({10, 20, 30, 40})};
  EXPECT_EQ(units_to_remove(layers, 0.25, PruneBudget::Global), (std::vector<int>{2, 0}));
  EXPECT_EQ(units_to_remove(layers, 0.5, PruneBudget::Global), (std::vector<int>{3, 1}));
  EXPECT_EQ(units_to_remove(layers, 0.99, PruneBudget::Global), (std::vector<int>{3, 3}));
  // A unit of 4 heads against units of 1 compares by share per head (0.025 against 0.2); sizes count
  // towards the budget.
  const std::vector<std::vector<PruneUnit>> sized{units({1, 9}, 4), units({1, 1, 1, 1, 1})};
  EXPECT_EQ(units_to_remove(sized, 1.0 / 13, PruneBudget::Global), (std::vector<int>{0, 1}));
  EXPECT_EQ(units_to_remove(sized, 3.0 / 13, PruneBudget::Global), (std::vector<int>{1, 0}));
  EXPECT_EQ(units_to_remove(sized, 8.0 / 13, PruneBudget::Global), (std::vector<int>{1, 4}));
}

TEST(StructuredPrune, ParsesItsSpecAndNamesWhatIsWrong) {
  auto spec = parse_structured_spec("heads=0.25,ffn=0.3,budget=global");
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_DOUBLE_EQ(spec->heads, 0.25);
  EXPECT_DOUBLE_EQ(spec->ffn, 0.3);
  EXPECT_DOUBLE_EQ(spec->kv_heads, 0.0);
  EXPECT_EQ(spec->budget, PruneBudget::Global);
  EXPECT_EQ(to_string(spec.value()), "heads=0.25,kv=0,ffn=0.3,budget=global");
  EXPECT_TRUE(parse_structured_spec("kv=0.5").ok());
  for (const char* bad : {"", "heads=1", "heads=-0.1", "heads=x", "ffn=0.2x", "budget=all,ffn=0.1", "layers=0.2", "heads=0"}) {
    auto r = parse_structured_spec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("--structured"), std::string::npos) << r.error();
    }
  }
}

// A random F32 model; fan-in scaled so that logits stay well conditioned.
std::string random_model(const std::string& name, const std::string& arch, int n_heads, int n_kv_heads) {
  MakeModelOptions o;
  o.shape.arch = arch;
  o.shape.n_embd = 128, o.shape.n_ff = 256, o.shape.n_heads = n_heads, o.shape.n_kv_heads = n_kv_heads, o.shape.n_layers = 3;
  o.fan_in_init = true;
  const std::string path = test::temp_path(name);
  EXPECT_TRUE(make_model(o, path).ok());
  return path;
}

// A copy of the model at `in` in which what `keep` removes contributes nothing: the attention output's
// columns of removed heads and ffn_down's columns of removed channels are zero. It computes exactly what
// the structured-pruned model computes.
void write_masked(const std::string& in_path, const HParams& hp, const std::vector<LayerKeep>& keep, const std::string& out) {
  auto in = GgufFile::open(in_path);
  ASSERT_TRUE(in.ok());
  GgufWriter w;
  for (const std::string& key : in->keys()) w.set_value(key, *in->find(key));
  for (const TensorView& t : in->tensors()) w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  const Status written = w.write(out, [&](size_t i, std::vector<uint8_t>& bytes) {
    const TensorView& t = in->tensors()[i];
    std::memcpy(bytes.data(), t.data, t.n_bytes);
    int il = -1;
    char role[64] = {};
    if (std::sscanf(t.name.c_str(), "blk.%d.%63s", &il, role) != 2) return;
    std::vector<bool> kept_column(static_cast<size_t>(t.ne[0]), true);
    const LayerKeep& k = keep[static_cast<size_t>(il)];
    if (std::string(role) == "attn_output.weight") {
      kept_column.assign(kept_column.size(), false);
      for (int h : k.heads)
        for (int d = 0; d < hp.head_dim; ++d) kept_column[static_cast<size_t>(h * hp.head_dim + d)] = true;
    } else if (std::string(role) == "ffn_down.weight" && !k.ffn.empty()) {
      kept_column.assign(kept_column.size(), false);
      for (int j : k.ffn) kept_column[static_cast<size_t>(j)] = true;
    } else {
      return;
    }
    ASSERT_EQ(t.type, DType::F32);
    auto* x = reinterpret_cast<float*>(bytes.data());
    for (int64_t r = 0; r < t.ne[1]; ++r)
      for (int64_t j = 0; j < t.ne[0]; ++j)
        if (!kept_column[static_cast<size_t>(j)]) x[r * t.ne[0] + j] = 0.0f;
  });
  ASSERT_TRUE(written.ok()) << written.error();
}

// The model at `in` with metadata changed by `edit`, written to `out`.
void rewrite_metadata(const std::string& in_path, const std::string& out, const std::function<void(GgufWriter&)>& edit) {
  auto in = GgufFile::open(in_path);
  ASSERT_TRUE(in.ok());
  GgufWriter w;
  for (const std::string& key : in->keys()) w.set_value(key, *in->find(key));
  edit(w);
  for (const TensorView& t : in->tensors()) w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  ASSERT_TRUE(w.write(out, [&](size_t i, std::vector<uint8_t>& bytes) {
                 std::memcpy(bytes.data(), in->tensors()[i].data, in->tensors()[i].n_bytes);
               }).ok());
}

// Per-layer head counts and FFN widths: arrays of one integer per layer, checked like the scalars.
TEST(StructuredPrune, PerLayerShapesAreReadAndChecked) {
  const std::string in = random_model("sp-meta.gguf", "llama", 8, 2), out = test::temp_path("sp-meta-edit.gguf");
  const auto load_error = [&](const std::function<void(GgufWriter&)>& edit) {
    rewrite_metadata(in, out, edit);
    auto m = Model::load(out);
    return m.ok() ? std::string() : m.error();
  };
  EXPECT_EQ(load_error([](GgufWriter& w) { w.set_i32_array("llama.attention.head_count", {8, 8, 8}); }), "");
  EXPECT_NE(load_error([](GgufWriter& w) { w.set_i32_array("llama.attention.head_count", {8, 8}); }).find("2 entries for 3 layers"),
            std::string::npos);
  EXPECT_NE(load_error([](GgufWriter& w) {
              w.set_u32("llama.attention.key_length", 16);
              w.set_i32_array("llama.attention.head_count", {8, 6, 8});
              w.set_i32_array("llama.attention.head_count_kv", {2, 4, 2});
            }).find("not a multiple of head_count_kv 4 in layer 1"),
            std::string::npos);
  EXPECT_NE(load_error([](GgufWriter& w) { w.set_i32_array("llama.attention.head_count", {8, 4, 8}); }).find("key_length"),
            std::string::npos);
  EXPECT_NE(load_error([](GgufWriter& w) {
              w.set_u32("llama.attention.key_length", 16);
              w.set_i32_array("llama.attention.head_count", {8, 4, 8});
            }).find("blk.1.attn_q.weight"),
            std::string::npos);
  EXPECT_NE(load_error([](GgufWriter& w) { w.set_i32_array("llama.feed_forward_length", {256, 0, 256}); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(load_error([](GgufWriter& w) { w.set_f32_array("llama.feed_forward_length", {256, 256, 256}); }).find("expected integers"),
            std::string::npos);
  std::filesystem::remove(in), std::filesystem::remove(out);
}

struct PrunedCase {
  const char* arch;
  int n_heads, n_kv_heads;
  const char* spec;
  KvType kv;
};

class StructuredPruneModel : public ::testing::TestWithParam<PrunedCase> {};

// The pruned model (fewer heads, KV heads and FFN channels, different in each layer) gives the logits of
// the full model with the removed units' output columns zeroed, at every position of a prompt.
TEST_P(StructuredPruneModel, ComputesWhatTheMaskedModelComputes) {
  const PrunedCase c = GetParam();
  const std::string tag = std::string(c.arch) + std::to_string(c.n_kv_heads) + kv_type_name(c.kv);
  const std::string in = random_model("sp-in-" + tag + ".gguf", c.arch, c.n_heads, c.n_kv_heads);
  const std::string out = test::temp_path("sp-out-" + tag + ".gguf"), masked = test::temp_path("sp-masked-" + tag + ".gguf");
  ThreadPool pool(2);
  auto source = Model::load(in);
  ASSERT_TRUE(source.ok()) << source.error();
  const std::vector<int32_t> prompt = test::iota_tokens(40, 300);
  auto importance = collect_importance(*source.value(), pool, {prompt});
  ASSERT_TRUE(importance.ok()) << importance.error();

  PruneOptions o;
  o.input = in, o.output = out;
  o.spec.method = PruneMethod::Wanda;
  o.importance = &importance.value();
  auto spec = parse_structured_spec(c.spec);
  ASSERT_TRUE(spec.ok()) << spec.error();
  o.structured = spec.value();
  auto report = prune_model(o, pool);
  ASSERT_TRUE(report.ok()) << report.error();
  auto file = GgufFile::open(in);
  ASSERT_TRUE(file.ok());
  auto keep = plan_structured(file.value(), source.value()->hparams(), spec.value(), &importance.value(), pool);
  ASSERT_TRUE(keep.ok()) << keep.error();
  write_masked(in, source.value()->hparams(), keep.value(), masked);

  auto pruned = Model::load(out);
  ASSERT_TRUE(pruned.ok()) << pruned.error();
  auto reference = Model::load(masked);
  ASSERT_TRUE(reference.ok()) << reference.error();
  const HParams& hp = pruned.value()->hparams();
  int64_t heads = 0, full_heads = 0;
  for (int il = 0; il < hp.n_layers; ++il) {
    const LayerKeep& k = keep.value()[static_cast<size_t>(il)];
    EXPECT_EQ(hp.layer(il).n_heads, static_cast<int>(k.heads.size()));
    EXPECT_EQ(hp.layer(il).n_kv_heads, static_cast<int>(k.kv_heads.size()));
    EXPECT_EQ(hp.layer(il).n_ff, static_cast<int>(k.ffn.size()));
    EXPECT_EQ(hp.layer(il).n_heads % hp.layer(il).n_kv_heads, 0);
    heads += hp.layer(il).n_heads, full_heads += c.n_heads;
  }
  EXPECT_LT(heads, full_heads);
  EXPECT_LT(report->bytes_out, report->bytes_in);
  EXPECT_LE(pruned.value()->kv_spec(1, 16, c.kv).bytes_per_token(), reference.value()->kv_spec(1, 16, c.kv).bytes_per_token());

  GeneratorConfig config;
  config.n_ctx = 64;
  config.kv_types = c.kv;
  Generator a(*pruned.value(), pool, config), b(*reference.value(), pool, config);
  auto la = a.eval(prompt, true), lb = b.eval(prompt, true);
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), lb->size());
  float scale = 0, diff = 0;
  for (size_t i = 0; i < la->size(); ++i) scale = std::max(scale, std::fabs((*lb)[i])), diff = std::max(diff, std::fabs((*la)[i] - (*lb)[i]));
  EXPECT_LT(diff, 2e-3f * scale) << "max |logit| " << scale;
  for (const std::string& f : {in, out, masked}) std::filesystem::remove(f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, StructuredPruneModel,
    ::testing::Values(PrunedCase{"llama", 8, 2, "heads=0.25,ffn=0.3,budget=global", KvType::F32},
                      PrunedCase{"llama", 8, 4, "kv=0.3,heads=0.25,ffn=0.25,budget=global", KvType::F32},
                      PrunedCase{"llama", 8, 4, "kv=0.3,ffn=0.25,budget=global", KvType::Q8_0},
                      PrunedCase{"llama", 4, 4, "heads=0.5,ffn=0.5", KvType::F16},
                      PrunedCase{"qwen2", 8, 2, "kv=0.5,ffn=0.25", KvType::F32},
                      PrunedCase{"qwen3", 8, 4, "heads=0.5,kv=0.25,budget=global", KvType::F32}),
    [](const auto& info) { return std::to_string(info.index); });

}  // namespace
}  // namespace kestrel
