#include "compute/ref/ref_ops.h"

#include <cmath>

#include "compute/cpu/elementwise.h"
#include "quant/quantize.h"

namespace kestrel::ref {

double dot(DType type, const void* row, const float* x, size_t n) {
  std::vector<float> w(n);
  dequantize_row(type, row, w.data(), n);
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * x[i];
  return s;
}

void matmul(const WeightMatrix& w, const float* x, float* y, int n_tok) {
  for (int t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.n_out; ++r)
      y[t * w.n_out + r] = static_cast<float>(dot(w.type, w.row(r), x + t * w.n_in, static_cast<size_t>(w.n_in)));
}

void attention(const float* q, const KvLayerView& kv, const AttentionRows& rows, float* out, int n_tok, int n_heads,
               float scale) {
  const int group = n_heads / kv.n_kv_heads;
  for (int t = 0; t < n_tok; ++t) {
    const int n_keys = rows.positions[t] + 1;
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = q + (static_cast<size_t>(t) * n_heads + h) * kv.k_dim;
      std::vector<double> scores(static_cast<size_t>(n_keys));  // [n_keys]
      std::vector<float> k_row(static_cast<size_t>(kv.k_dim)), v_row(static_cast<size_t>(kv.v_dim));
      double max = -INFINITY;
      for (int p = 0; p < n_keys; ++p) {
        kv.read_k(rows.block_tables[t][p / kv.block_size], h / group, p % kv.block_size, k_row.data());
        double s = 0;
        for (int d = 0; d < kv.k_dim; ++d) s += static_cast<double>(qh[d]) * k_row[static_cast<size_t>(d)];
        scores[static_cast<size_t>(p)] = s * scale;
        max = std::max(max, scores[static_cast<size_t>(p)]);
      }
      double denom = 0;
      for (auto& s : scores) denom += (s = std::exp(s - max));
      std::vector<double> o(static_cast<size_t>(kv.v_dim));  // [v_dim]
      for (int p = 0; p < n_keys; ++p) {
        kv.read_v(rows.block_tables[t][p / kv.block_size], h / group, p % kv.block_size, v_row.data());
        for (int d = 0; d < kv.v_dim; ++d) o[static_cast<size_t>(d)] += scores[static_cast<size_t>(p)] * v_row[static_cast<size_t>(d)];
      }
      for (int d = 0; d < kv.v_dim; ++d)
        out[(static_cast<size_t>(t) * n_heads + h) * kv.v_dim + d] = static_cast<float>(o[static_cast<size_t>(d)] / denom);
    }
  }
}

void rmsnorm(const float* x, const float* weight, float* y, int n_tok, int n, float eps) {
  for (int t = 0; t < n_tok; ++t) {
    const float* xr = x + static_cast<size_t>(t) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double scale = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) y[static_cast<size_t>(t) * n + i] = static_cast<float>(xr[i] * scale * weight[i]);
  }
}

void rope(float* x, std::span<const int32_t> positions, int n_heads, int head_dim, int n_rot, float freq_base,
          RopeStyle style, const float* freq_factors) {
  const int half = n_rot / 2;
  for (size_t t = 0; t < positions.size(); ++t)
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + (t * static_cast<size_t>(n_heads) + static_cast<size_t>(h)) * static_cast<size_t>(head_dim);
      for (int i = 0; i < half; ++i) {
        const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / n_rot) / (freq_factors ? freq_factors[i] : 1.0);
        const double theta = positions[t] * freq;
        const int a = style == RopeStyle::Interleaved ? 2 * i : i, b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
        const double x0 = head[a], x1 = head[b];
        head[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
        head[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
      }
    }
}

}  // namespace kestrel::ref

namespace kestrel {

void silu_mul_reference(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace kestrel
