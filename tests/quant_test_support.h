// A quantization problem for tests of calibration-aware methods (GPTQ, AWQ): a weight matrix and
// inputs with correlated channels of unequal size, as a layer's inputs are, with their Hessian.
#pragma once
#include <cmath>
#include <vector>

#include "quant/importance_quantize.h"
#include "quant/quantize.h"
#include "test_support.h"

namespace kestrel::test {

// Inputs with correlated channels of unequal size, as a layer's inputs are: x = z M with a random mixing
// matrix M and a few channels scaled up.
struct QuantProblem {
  int64_t n_out = 48, n_in = 512, n_tok = 1024;
  std::vector<float> w, x, h;  // [n_out][n_in] [n_tok][n_in] [n_in][n_in]
  // Every 37th channel is `outlier` times larger.
  explicit QuantProblem(uint32_t seed, bool dead_channel = false, float outlier = 8.0f) {
    w = gaussian_vector(static_cast<size_t>(n_out * n_in), seed);
    const auto z = gaussian_vector(static_cast<size_t>(n_tok * n_in), seed + 1);
    const auto m = gaussian_vector(static_cast<size_t>(n_in * n_in), seed + 2, 1.0f / std::sqrt(static_cast<float>(n_in)));
    x.assign(static_cast<size_t>(n_tok * n_in), 0.0f);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t k = 0; k < n_in; ++k) {
        const float zk = z[static_cast<size_t>(t * n_in + k)] + (k < 8 ? z[static_cast<size_t>(t * n_in)] * 2.0f : 0.0f);
        for (int64_t j = 0; j < n_in; ++j) x[static_cast<size_t>(t * n_in + j)] += zk * m[static_cast<size_t>(k * n_in + j)];
      }
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_in; j += 37) x[static_cast<size_t>(t * n_in + j)] *= outlier;
    if (dead_channel)
      for (int64_t t = 0; t < n_tok; ++t) x[static_cast<size_t>(t * n_in + 5)] = 0.0f;
    h.assign(static_cast<size_t>(n_in * n_in), 0.0f);
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) {
        double s = 0;
        for (int64_t t = 0; t < n_tok; ++t) s += x[static_cast<size_t>(t * n_in + i)] * static_cast<double>(x[static_cast<size_t>(t * n_in + j)]);
        h[static_cast<size_t>(i * n_in + j)] = static_cast<float>(s / static_cast<double>(n_tok));
      }
  }
  // ||(W - Q) X||^2 / ||W X||^2 for Q [n_out][n_in].
  double output_error(const std::vector<float>& q) const {
    double e = 0, s = 0;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t i = 0; i < n_in; ++i)
        for (int64_t j = 0; j < n_in; ++j) {
          const double hij = h[static_cast<size_t>(i * n_in + j)];
          e += (w[static_cast<size_t>(r * n_in + i)] - q[static_cast<size_t>(r * n_in + i)]) *
               static_cast<double>(w[static_cast<size_t>(r * n_in + j)] - q[static_cast<size_t>(r * n_in + j)]) * hij;
          s += w[static_cast<size_t>(r * n_in + i)] * static_cast<double>(w[static_cast<size_t>(r * n_in + j)]) * hij;
        }
    return e / s;
  }
  // The same with Q the decoded rows.
  double output_error(DType t, const std::vector<uint8_t>& rows) const {
    std::vector<float> q(w.size());
    for (int64_t r = 0; r < n_out; ++r)
      dequantize_row(t, rows.data() + static_cast<size_t>(r) * row_bytes(t, static_cast<size_t>(n_in)), q.data() + r * n_in,
                     static_cast<size_t>(n_in));
    return output_error(q);
  }
  std::vector<uint8_t> rows_by(DType t, const float* importance) const {
    std::vector<uint8_t> rows(row_bytes(t, static_cast<size_t>(n_in)) * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      uint8_t* dst = rows.data() + static_cast<size_t>(r) * row_bytes(t, static_cast<size_t>(n_in));
      if (importance) quantize_row_weighted(t, w.data() + r * n_in, dst, static_cast<size_t>(n_in), importance);
      else quantize_row(t, w.data() + r * n_in, dst, static_cast<size_t>(n_in));
    }
    return rows;
  }
  std::vector<float> diagonal() const {
    std::vector<float> d(static_cast<size_t>(n_in));
    for (int64_t j = 0; j < n_in; ++j) d[static_cast<size_t>(j)] = h[static_cast<size_t>(j * n_in + j)];
    return d;
  }
};

}  // namespace kestrel::test
