// AWQ (quant/awq.h, model/awq_fold.h): the scale search lowers the output error it scores and never
// raises it, the clip search never raises a block's output error, and folding the scales into a model
// leaves its float outputs unchanged while its quantized file tracks the float model better.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/generator.h"
#include "io/gguf.h"
#include "model/awq_fold.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "model/model_quantizer.h"
#include "quant/awq.h"
#include "quant_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Awq, ScalesTheChannelsThatCarryLargeInputs) {
  const test::QuantProblem p(61, false, 40.0f);  // outlier channels, as trained models' inputs have
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(t));
    const AwqMatrix m{p.w.data(), p.n_out, t};
    const AwqScales found = awq_search(std::span<const AwqMatrix>(&m, 1), p.n_in, p.h.data(), AwqOptions{}, pool);
    ASSERT_EQ(found.s.size(), static_cast<size_t>(p.n_in));
    EXPECT_GT(found.alpha, 0.0);
    EXPECT_LT(found.error_after, 0.95 * found.error_before);
    double log_sum = 0;
    for (float v : found.s) log_sum += std::log(v);
    EXPECT_NEAR(log_sum / p.n_in, 0.0, 1e-4);
    double outliers = 0, others = 0;  // mean scales of the 40x channels and of the rest
    for (int64_t j = 0; j < p.n_in; ++j) (j % 37 ? others : outliers) += found.s[static_cast<size_t>(j)];
    EXPECT_GT(outliers / 14, 1.5 * others / (p.n_in - 14));
    // The scored error is the output error of the scaled, rounded matrix.
    std::vector<float> scaled(p.w.size()), importance(static_cast<size_t>(p.n_in)), q(p.w.size());
    for (int64_t j = 0; j < p.n_in; ++j) importance[static_cast<size_t>(j)] = p.h[static_cast<size_t>(j * p.n_in + j)] / (found.s[static_cast<size_t>(j)] * found.s[static_cast<size_t>(j)]);
    std::vector<uint8_t> row(row_bytes(t, static_cast<size_t>(p.n_in)));
    for (int64_t r = 0; r < p.n_out; ++r) {
      for (int64_t j = 0; j < p.n_in; ++j) scaled[static_cast<size_t>(j)] = p.w[static_cast<size_t>(r * p.n_in + j)] * found.s[static_cast<size_t>(j)];
      quantize_row_weighted(t, scaled.data(), row.data(), static_cast<size_t>(p.n_in), importance.data());
      dequantize_row(t, row.data(), q.data() + r * p.n_in, static_cast<size_t>(p.n_in));
      for (int64_t j = 0; j < p.n_in; ++j) q[static_cast<size_t>(r * p.n_in + j)] /= found.s[static_cast<size_t>(j)];
    }
    EXPECT_NEAR(p.output_error(q), found.error_after, 1e-3 * found.error_after);
  }
  // Tied channels share a scale.
  std::vector<int64_t> tie(static_cast<size_t>(p.n_in));
  for (int64_t j = 0; j < p.n_in; ++j) tie[static_cast<size_t>(j)] = j % 64;
  const AwqMatrix m{p.w.data(), p.n_out, DType::Q4_0};
  const AwqScales tied = awq_search(std::span<const AwqMatrix>(&m, 1), p.n_in, p.h.data(), AwqOptions{}, pool, tie);
  for (int64_t j = 64; j < p.n_in; ++j) ASSERT_EQ(tied.s[static_cast<size_t>(j)], tied.s[static_cast<size_t>(j % 64)]);
  // Nothing to quantize (a float type): s = 1.
  const AwqMatrix f{p.w.data(), p.n_out, DType::F16};
  const AwqScales none = awq_search(std::span<const AwqMatrix>(&f, 1), p.n_in, p.h.data(), AwqOptions{}, pool);
  EXPECT_EQ(none.alpha, 0.0);
  for (float v : none.s) ASSERT_EQ(v, 1.0f);
}

TEST(Awq, ClipSearchNeverRaisesTheOutputError) {
  const test::QuantProblem p(71);
  const std::vector<float> ones(static_cast<size_t>(p.n_in), 1.0f);
  const std::vector<float> groups = awq_group_hessians(p.h.data(), p.n_in, ones);
  const auto importance = p.diagonal();
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t row = row_bytes(t, static_cast<size_t>(p.n_in));
    std::vector<uint8_t> clipped(row * static_cast<size_t>(p.n_out));
    for (int64_t r = 0; r < p.n_out; ++r)
      awq_clip_quantize_row(t, p.w.data() + r * p.n_in, clipped.data() + static_cast<size_t>(r) * row, static_cast<size_t>(p.n_in),
                            groups.data(), importance.data());
    const double searched = p.output_error(t, p.rows_by(t, importance.data())), after = p.output_error(t, clipped);
    std::printf("%s output error: importance search %.4g, with the clip search %.4g\n", dtype_name(t), searched, after);
    EXPECT_LE(after, searched * 1.02);  // per block never higher on the block-diagonal part of H
  }
}

// Writes `source` with the fold's tensors in place of its own (as F32), unquantized.
void write_folded(const std::string& source, const AwqFold& fold, const std::string& path) {
  auto in = GgufFile::open(source);
  ASSERT_TRUE(in.ok());
  GgufWriter w;
  for (const std::string& key : in->keys()) w.set_value(key, *in->find(key));
  for (const TensorView& t : in->tensors()) {
    ASSERT_EQ(t.type, DType::F32);
    w.add_tensor(t.name, DType::F32, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
  }
  const Status written = w.write(path, [&](size_t i, std::vector<uint8_t>& bytes) {
    const TensorView& t = in->tensors()[i];
    const auto it = fold.tensors.find(t.name);
    std::memcpy(bytes.data(), it == fold.tensors.end() ? t.data : reinterpret_cast<const uint8_t*>(it->second.data()), t.n_bytes);
  });
  ASSERT_TRUE(written.ok()) << written.error();
}

TEST(Awq, FoldKeepsTheFloatModelAndItsFileTracksItBetter) {
  const std::string path = test::temp_path("awq.gguf"), folded = test::temp_path("awq-folded.gguf");
  const std::string awq = test::temp_path("awq-q4.gguf"), rtn = test::temp_path("awq-rtn.gguf");
  MakeModelOptions options;
  options.shape.n_embd = 256;
  options.shape.n_layers = 2;
  options.shape.n_heads = 8;
  options.shape.n_kv_heads = 2;  // grouped: the v -> o fold ties the heads of a group
  options.shape.n_ff = 256;
  options.outlier_channels = 6;
  ASSERT_TRUE(make_model(options, path).ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> chunks;
  for (int c = 0; c < 6; ++c) chunks.push_back(test::iota_tokens(64, 40 + 40 * c));
  auto hessians = collect_hessians(*model.value(), pool, chunks);
  ASSERT_TRUE(hessians.ok());

  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  const auto target = [](const std::string& name) -> std::optional<DType> {
    if (name.find("norm") != std::string::npos || name == "token_embd.weight") return std::nullopt;
    return DType::Q4_0;
  };
  auto fold = awq_fold(file.value(), hessians.value(), target, AwqOptions{}, pool);
  ASSERT_TRUE(fold.ok()) << fold.error();
  int scaled = 0;
  for (const AwqGroupReport& g : fold->groups) scaled += g.alpha > 0;
  EXPECT_GE(scaled, 3);
  EXPECT_TRUE(fold->tensors.count("blk.0.attn_norm.weight") || fold->tensors.count("blk.1.attn_norm.weight"));
  write_folded(path, fold.value(), folded);

  GeneratorConfig config;
  config.n_ctx = 64;
  config.kv_types = KvType::F32;  // F16 pages would round the scaled V differently
  const std::vector<int32_t> text = chunks[1];  // measured where calibrated: random weights do not generalise
  const auto logits_of = [&](const std::string& file_path) {
    auto m = Model::load(file_path);
    EXPECT_TRUE(m.ok());
    Generator g(*m.value(), pool, config);
    auto l = g.eval(text, true);
    EXPECT_TRUE(l.ok());
    return l.ok() ? l.value() : std::vector<float>();
  };
  const std::vector<float> base = logits_of(path);
  const auto error_of = [&](const std::string& file_path) {
    const std::vector<float> l = logits_of(file_path);
    double e = 0, s = 0;
    for (size_t i = 0; i < base.size(); ++i) e += std::pow(l[i] - base[i], 2), s += std::pow(base[i], 2);
    return std::sqrt(e / s);
  };
  EXPECT_LT(error_of(folded), 1e-5);  // the fold changes nothing in float

  const ImportanceMatrix importance = importance_from_hessians(hessians.value());
  QuantizeOptions q{path, awq, *find_quant_scheme("Q4_0"), true, QuantMethod::Awq, &importance, &hessians.value()};
  auto report = quantize_model(q, pool);
  ASSERT_TRUE(report.ok()) << report.error();
  int by_awq = 0;
  for (const auto& t : report->tensors) by_awq += t.method == QuantMethod::Awq;
  EXPECT_GT(by_awq, 4);
  ASSERT_TRUE(quantize_model({path, rtn, *find_quant_scheme("Q4_0"), true}, pool).ok());
  const double awq_error = error_of(awq), rtn_error = error_of(rtn);
  std::printf("relative logit error: rtn %.4f, awq %.4f\n", rtn_error, awq_error);
  EXPECT_LT(awq_error, 0.9 * rtn_error);
  // AWQ without Hessians is refused.
  q.hessians = nullptr;
  EXPECT_FALSE(quantize_model(q, pool).ok());
  for (const std::string& f : {path, folded, awq, rtn}) std::filesystem::remove(f);
}

}  // namespace
}  // namespace kestrel
