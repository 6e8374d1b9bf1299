// GPTQ (quant/gptq.h) and what it stands on: the Cholesky factorisation and triangular inverse (quant/
// cholesky.h) against direct products, block grids (quant/block_grid.h) against the block formats, and
// GPTQ's output error ||(W - Q) X|| on correlated inputs against round-to-nearest and the importance search.
#include <cmath>
#include <random>

#include "quant/block_grid.h"
#include "quant/linalg.h"
#include "quant/gptq.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"
#include "quant_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

constexpr DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                            DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(Cholesky, FactorsAndInvertsSymmetricPositiveDefiniteMatrices) {
  const int64_t n = 150;  // more than one block of rows
  ThreadPool pool(2);
  const auto b = test::gaussian_vector(static_cast<size_t>(n * n), 3);
  std::vector<double> a(static_cast<size_t>(n * n));  // [n][n] B B^T + I
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = i == j ? 1.0 : 0.0;
      for (int64_t k = 0; k < n; ++k) s += b[static_cast<size_t>(i * n + k)] * static_cast<double>(b[static_cast<size_t>(j * n + k)]);
      a[static_cast<size_t>(i * n + j)] = s;
    }
  std::vector<double> l = a;
  ASSERT_TRUE(cholesky_lower(l.data(), n, pool));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (j > i) {
        EXPECT_EQ(l[static_cast<size_t>(i * n + j)], 0.0);
      }
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += l[static_cast<size_t>(i * n + k)] * l[static_cast<size_t>(j * n + k)];
      worst = std::max(worst, std::fabs(s - a[static_cast<size_t>(i * n + j)]));
    }
  EXPECT_LT(worst, 1e-9);
  std::vector<double> inv = l;
  invert_lower(inv.data(), n, pool);
  worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += l[static_cast<size_t>(i * n + k)] * inv[static_cast<size_t>(k * n + j)];
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-9);
  // Not positive definite: refused.
  std::vector<double> indefinite = {1, 2, 2, 1};
  EXPECT_FALSE(cholesky_lower(indefinite.data(), 2, pool));
  std::vector<double> nan = {std::nan(""), 0, 0, 1};
  EXPECT_FALSE(cholesky_lower(nan.data(), 2, pool));
}

// The summed quadratic forms against a direct double loop, with n large enough that H is cut into several
// cached blocks of rows (and not a multiple of the block), an unsymmetric H and some zero entries in x.
TEST(QuadraticForms, SumsEveryRowsFormOverBlocksOfH) {
  const int64_t n = 1003, rows = 3;
  ThreadPool pool(2);
  const auto h = test::gaussian_vector(static_cast<size_t>(n * n), 4);
  auto x = test::gaussian_vector(static_cast<size_t>(rows * n), 5);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.0f;
  double expected = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t a = 0; a < n; ++a) {
      double ha = 0;
      for (int64_t b = 0; b < n; ++b) ha += static_cast<double>(h[static_cast<size_t>(a * n + b)]) * x[static_cast<size_t>(r * n + b)];
      expected += ha * x[static_cast<size_t>(r * n + a)];
    }
  const double got = quadratic_form_sum(h.data(), n, x.data(), rows, pool);
  EXPECT_NEAR(got, expected, 1e-6 * static_cast<double>(rows * n * n));
  EXPECT_EQ(quadratic_form_sum(h.data(), n, x.data(), 0, pool), 0.0);
}

// A block's grid holds its decoded values, and writing back the codes of those values restores the block.
TEST(BlockGrid, ReadsAndRewritesEveryFormatsCodes) {
  const size_t n = 1024;
  auto x = test::gaussian_vector(n, 5);
  for (size_t i = 0; i < n; i += 61) x[i] *= 5.0f;
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    ASSERT_TRUE(has_block_grid(t));
    const auto& traits = dtype_traits(t);
    std::vector<uint8_t> row(row_bytes(t, n));
    std::vector<float> decoded(n);
    quantize_row(t, x.data(), row.data(), n);
    dequantize_row(t, row.data(), decoded.data(), n);
    std::vector<uint8_t> rewritten = row;
    for (size_t b = 0; b < n / traits.block_elems; ++b) {
      uint8_t* block = rewritten.data() + b * traits.block_bytes;
      const BlockGrid g = block_grid(t, block);
      ASSERT_EQ(g.n, static_cast<int>(traits.block_elems));
      ASSERT_EQ(g.levels, grid_levels(t));
      std::vector<uint8_t> codes(traits.block_elems, 0);
      for (int i = 0; i < g.n; ++i) {
        const float v = decoded[b * traits.block_elems + static_cast<size_t>(i)];
        codes[static_cast<size_t>(i)] = g.code(i, v);
        ASSERT_NEAR(g.value(i, codes[static_cast<size_t>(i)]), v, 1e-6f * (1 + std::fabs(v)));
      }
      // Scribble over the code bytes (ql and qh lead a Q6_K block; the others start with their scales: fp16 d
      // (and m for Q4_1 / Q5_1), or d, dmin and 12 bytes of sub-block scales for Q4_K / Q5_K).
      const bool k_scales = t == DType::Q4_K || t == DType::Q5_K, with_min = t == DType::Q4_1 || t == DType::Q5_1;
      // Q2_K: 16 scale bytes, 64 code bytes, d and dmin; Q3_K: 32 + 64 code bytes first.
      size_t first = t == DType::Q6_K || t == DType::Q3_K ? 0 : k_scales || t == DType::Q2_K ? 16 : with_min ? 4 : 2;
      size_t last = t == DType::Q6_K ? 192 : t == DType::Q2_K ? 80 : t == DType::Q3_K ? 96 : traits.block_bytes;
      std::fill(block + first, block + last, uint8_t{0x5A});
      set_block_codes(t, block, codes.data());
    }
    std::vector<float> again(n);
    dequantize_row(t, rewritten.data(), again.data(), n);
    EXPECT_EQ(again, decoded);
  }
}

TEST(Gptq, LowersTheOutputErrorBelowRoundingAndTheImportanceSearch) {
  const test::QuantProblem p(11);
  ThreadPool pool(2);
  const auto importance = p.diagonal();
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const double rtn = p.output_error(t, p.rows_by(t, nullptr));
    const double searched = p.output_error(t, p.rows_by(t, importance.data()));
    double gptq[2];
    for (bool act_order : {false, true}) {
      std::vector<uint8_t> rows(row_bytes(t, static_cast<size_t>(p.n_in)) * static_cast<size_t>(p.n_out));
      GptqOptions options;
      options.act_order = act_order;
      ASSERT_TRUE(gptq_quantize(t, p.w.data(), p.n_out, p.n_in, p.h.data(), options, rows.data(), pool).ok());
      gptq[act_order] = p.output_error(t, rows);
    }
    std::printf("%s output error: rtn %.4g, imatrix %.4g, gptq %.4g (%.2fx lower than rtn), act-order %.4g\n", dtype_name(t), rtn,
                searched, gptq[0], rtn / gptq[0], gptq[1]);
    EXPECT_LT(gptq[0], 0.7 * rtn);
    EXPECT_LT(gptq[0], 0.85 * searched);
    EXPECT_LT(gptq[1], 0.7 * rtn);
  }
}

// With H = I no error has anywhere to go: GPTQ is the importance search with equal weights, each weight
// rounded to its nearest grid value.
// A channel no input reaches (H_jj = 0) is quantized from zero.
TEST(Gptq, IdentityHessianIsTheSearchAndDeadChannelsAreZero) {
  const int64_t n_out = 8, n_in = 512;
  const auto w = test::gaussian_vector(static_cast<size_t>(n_out * n_in), 31);
  std::vector<float> h(static_cast<size_t>(n_in * n_in), 0.0f);
  for (int64_t j = 0; j < n_in; ++j) h[static_cast<size_t>(j * n_in + j)] = 1.0f;
  ThreadPool pool(2);
  for (DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const size_t row = row_bytes(t, static_cast<size_t>(n_in));
    std::vector<uint8_t> gptq(row * n_out), searched(row * n_out);
    ASSERT_TRUE(gptq_quantize(t, w.data(), n_out, n_in, h.data(), GptqOptions{}, gptq.data(), pool).ok());
    for (int64_t r = 0; r < n_out; ++r) quantize_row_weighted(t, w.data() + r * n_in, searched.data() + r * row, static_cast<size_t>(n_in), nullptr);
    // The same scales, and every code the nearest on its grid (the packers round by the unstored scale,
    // so their codes may differ by one where a weight sits near a midpoint).
    const auto& traits = dtype_traits(t);
    for (size_t b = 0; b < gptq.size() / traits.block_bytes; ++b) {
      const BlockGrid g = block_grid(t, gptq.data() + b * traits.block_bytes), s = block_grid(t, searched.data() + b * traits.block_bytes);
      std::vector<float> decoded(traits.block_elems);
      dequantize_row(t, gptq.data() + b * traits.block_bytes, decoded.data(), traits.block_elems);
      for (int i = 0; i < g.n; ++i) {
        ASSERT_EQ(g.step[i], s.step[i]);
        ASSERT_EQ(g.offset[i], s.offset[i]);
        const float x = w[b * traits.block_elems + static_cast<size_t>(i)];
        ASSERT_EQ(decoded[static_cast<size_t>(i)], g.value(i, g.code(i, x))) << "block " << b << " element " << i;
      }
    }
  }
  const test::QuantProblem p(41, true);
  std::vector<uint8_t> rows(row_bytes(DType::Q4_0, static_cast<size_t>(p.n_in)) * static_cast<size_t>(p.n_out));
  ASSERT_TRUE(gptq_quantize(DType::Q4_0, p.w.data(), p.n_out, p.n_in, p.h.data(), GptqOptions{}, rows.data(), pool).ok());
  std::vector<float> decoded(static_cast<size_t>(p.n_in));
  dequantize_row(DType::Q4_0, rows.data(), decoded.data(), static_cast<size_t>(p.n_in));
  EXPECT_EQ(decoded[5], 0.0f);
  EXPECT_LT(p.output_error(DType::Q4_0, rows), 0.7 * p.output_error(DType::Q4_0, p.rows_by(DType::Q4_0, nullptr)));
  // A Hessian with NaNs is refused, not quantized into garbage.
  std::vector<float> bad = p.h;
  bad[0] = std::nanf("");
  EXPECT_FALSE(gptq_quantize(DType::Q4_0, p.w.data(), p.n_out, p.n_in, bad.data(), GptqOptions{}, rows.data(), pool).ok());
}

}  // namespace
}  // namespace kestrel
