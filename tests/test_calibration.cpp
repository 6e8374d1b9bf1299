// Calibration (model/calibration.h): the importance of a matrix's input channels is the mean square of the
// rows it multiplies, measured without changing the forward's results; quantizing with it (imatrix) writes
// a runnable file. The embedding's importance comes from the norms that read the residual stream.
#include <cmath>
#include <filesystem>
#include <numeric>

#include "engine/generator.h"
#include "io/gguf.h"
#include "model/activation_observer.h"
#include "model/calibration.h"
#include "model/embedding_importance.h"
#include "model/model_maker.h"
#include "model/model_quantizer.h"
#include "quant/quantize.h"
#include "test_support.h"

namespace kestrel {
namespace {

class Calibration : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeModelOptions options;
    options.shape.n_embd = 256;
    options.shape.n_layers = 2;
    options.shape.n_ff = 512;
    options.shape.n_expert = 4;
    options.shape.n_expert_used = 2;
    ASSERT_TRUE(make_model(options, path).ok());
    auto loaded = Model::load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.error();
    model = std::move(loaded).value();
  }
  void TearDown() override { std::filesystem::remove(path); }
  std::string path = test::temp_path("calibration.gguf");
  std::unique_ptr<Model> model;
  ThreadPool pool{2};
};

TEST_F(Calibration, MeasuresTheMeanSquareOfEachMatrixInput) {
  const std::vector<std::vector<int32_t>> chunks = {test::iota_tokens(20, 300), test::iota_tokens(9, 400)};
  auto measured = collect_importance(*model, pool, chunks);
  ASSERT_TRUE(measured.ok()) << measured.error();
  const ImportanceMatrix& m = measured.value();
  // Every matrix a token multiplies has an entry; the embedding table is looked up, not multiplied.
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
                           "blk.1.ffn_gate_inp.weight", "blk.1.ffn_down_exps.weight", "output.weight"})
    EXPECT_TRUE(m.tensors.count(name)) << name;
  EXPECT_FALSE(m.find("token_embd.weight", 0));
  // blk.0.attn_q multiplies the first layer's normalised embeddings: compute them directly.
  const HParams& hp = model->hparams();
  const TensorView& embd = *model->weights().token_embd;
  const float* norm = reinterpret_cast<const float*>(model->weights().layers[0].attn_norm->data);
  std::vector<double> want(static_cast<size_t>(hp.n_embd), 0.0);
  int n = 0;
  for (const auto& chunk : chunks)
    for (int32_t t : chunk) {
      const float* row = reinterpret_cast<const float*>(embd.row(t));
      double ss = 0;
      for (int j = 0; j < hp.n_embd; ++j) ss += static_cast<double>(row[j]) * row[j];
      const double inv = 1.0 / std::sqrt(ss / hp.n_embd + hp.rms_eps);
      for (int j = 0; j < hp.n_embd; ++j) want[static_cast<size_t>(j)] += std::pow(row[j] * inv * norm[j], 2);
      ++n;
    }
  const float* got = m.find("blk.0.attn_q.weight", 0);
  ASSERT_TRUE(got);
  EXPECT_EQ(m.tensors.at("blk.0.attn_q.weight").tokens[0], n);
  for (int j = 0; j < hp.n_embd; ++j) ASSERT_NEAR(got[j], want[static_cast<size_t>(j)] / n, 1e-4 * (1 + want[j] / n)) << j;
  // Experts: each slice counts the tokens routed to it; top-2 of 4 over 29 tokens routes 58 rows.
  const auto& down = m.tensors.at("blk.1.ffn_down_exps.weight");
  EXPECT_EQ(down.n_slices, 4);
  EXPECT_EQ(std::accumulate(down.tokens.begin(), down.tokens.end(), int64_t{0}), 2 * n);
  EXPECT_EQ(down.n_in, hp.n_ff);
  // Bad input is named.
  EXPECT_FALSE(collect_importance(*model, pool, {{1, 2, 1 << 30}}).ok());
  EXPECT_FALSE(collect_importance(*model, pool, {}).ok());
}

// Observing changes nothing: the same logits with and without an observer.
TEST_F(Calibration, ObservedForwardGivesTheSameLogits) {
  struct Counter : ActivationObserver {
    int calls = 0;
    void observe(std::span<const WeightMatrix>, const float*, int) override { ++calls; }
  } counter;
  const std::vector<int32_t> tokens = test::iota_tokens(6, 300);
  std::vector<float> plain, seen;
  for (ActivationObserver* observer : {static_cast<ActivationObserver*>(nullptr), static_cast<ActivationObserver*>(&counter)}) {
    KvStorage kv(model->kv_spec(1, 16, KvType::F32));
    const std::vector<int32_t> pages = {0}, positions = {0, 1, 2, 3, 4, 5}, rows = {5};
    const std::vector<const int32_t*> tables(tokens.size(), pages.data());
    ForwardWorkspace ws;
    ws.observer = observer;
    std::vector<float>& logits = observer ? seen : plain;
    logits.resize(static_cast<size_t>(model->hparams().n_vocab));
    model->forward(pool, ModelInput{tokens, positions, tables, rows}, kv, logits.data(), ws);
  }
  EXPECT_EQ(plain, seen);
  EXPECT_GT(counter.calls, 10);
}

TEST_F(Calibration, ImportanceQuantizedFileRuns) {
  auto measured = collect_importance(*model, pool, {test::iota_tokens(32, 300)});
  ASSERT_TRUE(measured.ok());
  const std::string out = test::temp_path("calibration-q4.gguf"), plain = test::temp_path("calibration-rtn.gguf");
  auto report = quantize_model({path, out, *find_quant_scheme("Q4_0"), true, QuantMethod::Importance, &measured.value()}, pool);
  ASSERT_TRUE(report.ok()) << report.error();
  ASSERT_TRUE(quantize_model({path, plain, *find_quant_scheme("Q4_0"), true}, pool).ok());
  int weighted = 0;
  for (const auto& t : report->tensors) weighted += t.method == QuantMethod::Importance;
  EXPECT_GT(weighted, 5);
  EXPECT_NE(test::read_file(out), test::read_file(plain));
  auto q = Model::load(out);
  ASSERT_TRUE(q.ok()) << q.error();
  GeneratorConfig config;
  config.n_ctx = 16;
  Generator g(*q.value(), pool, config);
  auto logits = g.eval(test::iota_tokens(4, 300), false);
  ASSERT_TRUE(logits.ok());
  for (float v : logits.value()) ASSERT_TRUE(std::isfinite(v));
  std::filesystem::remove(out);
  std::filesystem::remove(plain);
}

// The Hessians: symmetric, their diagonal the importance, one shared by the matrices of one input.
TEST_F(Calibration, HessiansShareInputsAndTheirDiagonalIsTheImportance) {
  const std::vector<std::vector<int32_t>> chunks = {test::iota_tokens(20, 300), test::iota_tokens(9, 400)};
  auto hessians = collect_hessians(*model, pool, chunks);
  ASSERT_TRUE(hessians.ok()) << hessians.error();
  auto importance = collect_importance(*model, pool, chunks);
  ASSERT_TRUE(importance.ok());
  const HessianSet& hs = hessians.value();
  EXPECT_EQ(hs.find("blk.0.attn_q.weight", 0), hs.find("blk.0.attn_k.weight", 0));
  EXPECT_EQ(hs.find("blk.0.attn_q.weight", 0), hs.find("blk.0.attn_v.weight", 0));
  EXPECT_NE(hs.find("blk.0.attn_q.weight", 0), hs.find("blk.0.attn_output.weight", 0));
  EXPECT_NE(hs.find("blk.1.ffn_down_exps.weight", 0), hs.find("blk.1.ffn_down_exps.weight", 1));
  EXPECT_FALSE(hs.find("token_embd.weight", 0));
  const ImportanceMatrix diagonal = importance_from_hessians(hs);
  for (const auto& [name, entry] : importance->tensors) {
    SCOPED_TRACE(name);
    for (int64_t s = 0; s < entry.n_slices; ++s) {
      const HessianSet::Hessian* h = hs.find(name, s);
      ASSERT_EQ(h != nullptr, importance->find(name, s) != nullptr);
      if (!h) continue;
      EXPECT_EQ(h->tokens, entry.tokens[static_cast<size_t>(s)]);
      const float* want = importance->find(name, s);
      const float* got = diagonal.find(name, s);
      ASSERT_TRUE(got);
      for (int64_t i = 0; i < h->n_in; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + want[i])) << i;
        for (int64_t j = 0; j < i; j += 7) ASSERT_EQ(h->h[static_cast<size_t>(i * h->n_in + j)], h->h[static_cast<size_t>(j * h->n_in + i)]);
      }
    }
  }
  EXPECT_GT(hs.bytes(), 0u);
}

// A GPTQ file runs, and on a calibration chunk its logits stay closer to the float model's than
// round-to-nearest's do (a random-weight model's inputs do not carry over to unseen tokens; held-out text is
// measured on real weights: docs/quantization.md).
TEST_F(Calibration, GptqQuantizedFileTracksTheModelBetterThanRounding) {
  std::vector<std::vector<int32_t>> chunks;
  for (int c = 0; c < 6; ++c) chunks.push_back(test::iota_tokens(64, 40 + 40 * c));
  auto hessians = collect_hessians(*model, pool, chunks);
  ASSERT_TRUE(hessians.ok());
  const ImportanceMatrix importance = importance_from_hessians(hessians.value());
  const std::string gptq = test::temp_path("calibration-gptq.gguf"), rtn = test::temp_path("calibration-rtn.gguf");
  QuantizeOptions options{path, gptq, *find_quant_scheme("Q4_0"), true, QuantMethod::Gptq, &importance, &hessians.value()};
  auto report = quantize_model(options, pool);
  ASSERT_TRUE(report.ok()) << report.error();
  int by_gptq = 0;
  for (const auto& t : report->tensors) by_gptq += t.method == QuantMethod::Gptq;
  EXPECT_GT(by_gptq, 5);
  ASSERT_TRUE(quantize_model({path, rtn, *find_quant_scheme("Q4_0"), true}, pool).ok());
  GeneratorConfig config;
  config.n_ctx = 64;
  const std::vector<int32_t> text = chunks[0];  // measured where calibrated: random weights do not generalise
  auto logits_of = [&](const Model& m) {
    Generator g(m, pool, config);
    auto l = g.eval(text, true);
    EXPECT_TRUE(l.ok());
    return l.ok() ? l.value() : std::vector<float>();
  };
  const std::vector<float> base = logits_of(*model);
  const auto error_of = [&](const std::string& file) {
    auto q = Model::load(file);
    EXPECT_TRUE(q.ok());
    const std::vector<float> l = logits_of(*q.value());
    double e = 0, s = 0;
    for (size_t i = 0; i < base.size(); ++i) e += std::pow(l[i] - base[i], 2), s += std::pow(base[i], 2);
    return std::sqrt(e / s);
  };
  const double gptq_error = error_of(gptq), rtn_error = error_of(rtn);
  std::printf("relative logit error: rtn %.4f, gptq %.4f\n", rtn_error, gptq_error);
  EXPECT_LT(gptq_error, 0.9 * rtn_error);
  std::filesystem::remove(gptq);
  std::filesystem::remove(rtn);
}

// The embedding's importance is the mean gamma_j^2 of the residual-stream norms, so with outlier channels
// the calibrated quantizers keep those channels' embedding values closer than round-to-nearest does.
TEST(EmbeddingImportance, WeightsTheEmbeddingByTheNormsThatReadIt) {
  const std::string path = test::temp_path("embedding-importance.gguf"), out = test::temp_path("embedding-importance-q4.gguf"),
                    plain = test::temp_path("embedding-importance-rtn.gguf");
  MakeModelOptions options;
  options.shape.n_embd = 256;
  options.shape.n_layers = 2;
  options.shape.n_ff = 512;
  options.outlier_channels = 4;
  ASSERT_TRUE(make_model(options, path).ok());
  auto opened = GgufFile::open(path);
  ASSERT_TRUE(opened.ok());
  const GgufFile& file = opened.value();
  ImportanceMatrix m;
  ASSERT_TRUE(add_embedding_importance(file, m).ok());
  const float* got = m.find("token_embd.weight", 0);
  ASSERT_TRUE(got);
  const std::vector<std::string> norms = {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "blk.1.attn_norm.weight",
                                          "blk.1.ffn_norm.weight", "output_norm.weight"};
  std::vector<double> want(256, 0.0);
  for (const std::string& name : norms) {
    const float* gamma = reinterpret_cast<const float*>(file.find_tensor(name)->data);
    for (size_t j = 0; j < want.size(); ++j) want[j] += gamma[j] * static_cast<double>(gamma[j]) / norms.size();
  }
  for (size_t j = 0; j < want.size(); ++j) ASSERT_NEAR(got[j], want[j], 1e-5 * want[j]) << j;
  const std::vector<int> outliers = outlier_channels(256, 4, options.seed);
  EXPECT_GT(got[outliers[0]], 100.0f * got[(outliers[0] + 1) % 256]);
  // An entry already there (a tied output matrix's measured inputs) is kept.
  ImportanceMatrix measured;
  measured.tensors["token_embd.weight"] = {256, 1, std::vector<float>(256, 2.0f), {7}, {}};
  ASSERT_TRUE(add_embedding_importance(file, measured).ok());
  EXPECT_EQ(measured.find("token_embd.weight", 0)[3], 2.0f);

  // Quantized by the importance search with an importance matrix that has no embedding entry: the
  // embedding is still weighted, and its error as the norms see it is lower than round-to-nearest's.
  ThreadPool pool{2};
  const ImportanceMatrix none;
  auto report = quantize_model({path, out, *find_quant_scheme("Q4_0"), true, QuantMethod::Importance, &none}, pool);
  ASSERT_TRUE(report.ok()) << report.error();
  for (const auto& t : report->tensors)
    EXPECT_EQ(t.method, t.name == "token_embd.weight" ? QuantMethod::Importance : t.converted ? QuantMethod::RoundToNearest : QuantMethod::Copy)
        << t.name;
  ASSERT_TRUE(quantize_model({path, plain, *find_quant_scheme("Q4_0"), true}, pool).ok());
  const auto weighted_error = [&](const std::string& quantized) {
    auto q = GgufFile::open(quantized);
    EXPECT_TRUE(q.ok());
    const TensorView& source = *file.find_tensor("token_embd.weight");
    const TensorView& table = *q->find_tensor("token_embd.weight");
    std::vector<float> back(256);
    double e = 0;
    for (int64_t r = 0; r < source.n_rows(); ++r) {
      dequantize_row(table.type, table.row(r), back.data(), back.size());
      const float* x = reinterpret_cast<const float*>(source.row(r));
      for (size_t j = 0; j < back.size(); ++j) e += want[j] * std::pow(back[j] - x[j], 2);
    }
    return e;
  };
  const double weighted = weighted_error(out), rounded = weighted_error(plain);
  std::printf("embedding error weighted by gamma^2: rtn %.4g, importance %.4g\n", rounded, weighted);
  EXPECT_LT(weighted, 0.5 * rounded);
  std::filesystem::remove(path);
  std::filesystem::remove(out);
  std::filesystem::remove(plain);
}

}  // namespace
}  // namespace kestrel
