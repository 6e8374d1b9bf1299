#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/importance_quantize.h"
#include "quant/linalg.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

// Adds to `error` the sum over scored rows r of d_r H d_r^T (d = W' - W), for one matrix under scales s, and
// to `*energy` (when given: it does not depend on s) the sum of w_r H w_r^T.
void score(const AwqMatrix& m, int64_t n_in, const float* h, const std::vector<float>& s, int64_t max_rows, ThreadPool& pool,
           double& error, double* energy) {
  const int64_t stride = std::max<int64_t>(1, m.n_out / std::max<int64_t>(1, max_rows));
  const int64_t n_rows = (m.n_out + stride - 1) / stride;
  const size_t n = static_cast<size_t>(n_in);
  std::vector<float> importance(n);  // [n_in] of the scaled inputs
  for (size_t j = 0; j < n; ++j) importance[j] = std::max(h[j * n + j], 0.0f) / (s[j] * s[j]);
  std::vector<float> d(static_cast<size_t>(n_rows) * n);  // [n_rows][n_in] W' - W of the scored rows
  pool.parallel_for_dynamic(static_cast<size_t>(n_rows), 1, [&](size_t begin, size_t end, int) {
    std::vector<float> scaled(n), back(n);  // [n_in]
    std::vector<uint8_t> row(row_bytes(m.type, n));
    for (size_t i = begin; i < end; ++i) {
      const float* w = m.w + static_cast<int64_t>(i) * stride * n_in;
      for (size_t j = 0; j < n; ++j) scaled[j] = w[j] * s[j];
      quantize_row_weighted(m.type, scaled.data(), row.data(), n, importance.data());
      dequantize_row(m.type, row.data(), back.data(), n);
      float* di = d.data() + i * n;
      for (size_t j = 0; j < n; ++j) di[j] = back[j] / s[j] - w[j];
    }
  });
  error += quadratic_form_sum(h, n_in, d.data(), n_rows, pool);
  if (energy) {
    for (int64_t i = 0; i < n_rows; ++i) std::copy_n(m.w + i * stride * n_in, n, d.data() + static_cast<size_t>(i) * n);
    *energy += quadratic_form_sum(h, n_in, d.data(), n_rows, pool);
  }
}

}  // namespace

AwqScales awq_search(std::span<const AwqMatrix> ms, int64_t n_in, const float* h, const AwqOptions& options, ThreadPool& pool,
                     std::span<const int64_t> tie) {
  AwqScales best;
  best.s.assign(static_cast<size_t>(n_in), 1.0f);
  const size_t n = static_cast<size_t>(n_in);
  // Per channel: log RMS activation, pooled over tied channels; dead channels at the smallest live value.
  std::vector<double> act(n);  // [n_in]
  for (size_t j = 0; j < n; ++j) act[j] = std::max(h[j * n + j], 0.0f);
  if (!tie.empty()) {
    std::vector<double> sum(n, 0.0), count(n, 0.0);  // [n_in] by tie key
    for (size_t j = 0; j < n; ++j) sum[static_cast<size_t>(tie[j])] += act[j], count[static_cast<size_t>(tie[j])] += 1;
    for (size_t j = 0; j < n; ++j) act[j] = sum[static_cast<size_t>(tie[j])] / count[static_cast<size_t>(tie[j])];
  }
  double floor = std::numeric_limits<double>::infinity();
  for (double v : act)
    if (v > 0) floor = std::min(floor, v);
  if (!std::isfinite(floor)) return best;  // no channel saw a token
  for (double& v : act) v = 0.5 * std::log(std::max(v, floor));

  double best_error = std::numeric_limits<double>::infinity(), energy = 0;  // energy: measured with alpha = 0
  std::vector<float> s(n);
  for (int k = 0; k <= options.grid; ++k) {
    const double alpha = static_cast<double>(k) / options.grid;
    double mean = 0;
    for (size_t j = 0; j < n; ++j) mean += alpha * act[j];
    mean /= static_cast<double>(n);
    for (size_t j = 0; j < n; ++j) s[j] = static_cast<float>(std::exp(alpha * act[j] - mean));
    double error = 0;
    for (const AwqMatrix& m : ms)
      if (dtype_traits(m.type).block_elems > 1 && n % dtype_traits(m.type).block_elems == 0)
        score(m, n_in, h, s, options.max_rows, pool, error, k == 0 ? &energy : nullptr);
    if (energy <= 0) return best;  // nothing quantized in this group
    const double relative = error / energy;
    if (k == 0) best.error_before = relative;
    if (relative < best_error) {
      best_error = relative;
      best.alpha = alpha;
      best.s = s;
      best.error_after = relative;
    }
  }
  return best;
}

namespace {
// d^T H_gg d summed over the groups of 32 of one block x[len] (d: the block's decoded values - x), H_gg the
// diagonal blocks of H from h_groups [len / 32][32][32].
double block_output_error(const float* x, const float* decoded, size_t len, const float* h_groups) {
  constexpr size_t kGroup = 32;
  double e = 0;
  float d[kGroup];
  for (size_t g = 0; g < len; g += kGroup) {
    const float* hg = h_groups + g / kGroup * kGroup * kGroup;
    for (size_t i = 0; i < kGroup; ++i) d[i] = decoded[g + i] - x[g + i];
    for (size_t i = 0; i < kGroup; ++i) {
      float hd = 0;
      for (size_t j = 0; j < kGroup; ++j) hd += hg[i * kGroup + j] * d[j];
      e += static_cast<double>(d[i]) * hd;
    }
  }
  return e;
}
}  // namespace

void awq_clip_quantize_row(DType type, const float* x, void* row, size_t n, const float* h_groups, const float* importance) {
  constexpr size_t kGroup = 32;
  const size_t bs = dtype_traits(type).block_elems;
  if (bs < kGroup || bs % kGroup || n % bs) {  // float types, or blocks that are not whole groups
    quantize_row_weighted(type, x, row, n, importance);
    return;
  }
  std::vector<float> clipped(x, x + n);  // [n]
  float fitted[kGroup];
  for (size_t g = 0; g < n; g += kGroup) {
    float lo = 0, hi = 0;
    for (size_t i = 0; i < kGroup; ++i) lo = std::min(lo, x[g + i]), hi = std::max(hi, x[g + i]);
    float best_ratio = 1.0f;
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k <= 20; ++k) {
      const float ratio = 1.0f - 0.025f * static_cast<float>(k);
      for (size_t i = 0; i < kGroup; ++i) clipped[g + i] = std::clamp(x[g + i], ratio * lo, ratio * hi);
      fit_group_weighted(type, clipped.data() + g, importance + g, fitted);
      const double e = block_output_error(x + g, fitted, kGroup, h_groups + g * kGroup);
      if (e < best) best = e, best_ratio = ratio;
    }
    for (size_t i = 0; i < kGroup; ++i) clipped[g + i] = std::clamp(x[g + i], best_ratio * lo, best_ratio * hi);
  }
  quantize_row_weighted(type, clipped.data(), row, n, importance);
  // The group fits only approximate a K-quant super-block (its sub-block scales are stored in 6 or 8 bits
  // under one block scale): keep a block rounded from the unclipped weights where that is the better one.
  const size_t block_bytes = dtype_traits(type).block_bytes;
  std::vector<uint8_t> plain(block_bytes);
  std::vector<float> decoded(bs);
  for (size_t b = 0; b < n; b += bs) {
    uint8_t* stored = static_cast<uint8_t*>(row) + b / bs * block_bytes;
    dequantize_row(type, stored, decoded.data(), bs);
    const double clipped_error = block_output_error(x + b, decoded.data(), bs, h_groups + b * kGroup);
    quantize_row_weighted(type, x + b, plain.data(), bs, importance + b);
    dequantize_row(type, plain.data(), decoded.data(), bs);
    if (block_output_error(x + b, decoded.data(), bs, h_groups + b * kGroup) < clipped_error)
      std::copy(plain.begin(), plain.end(), stored);
  }
}

std::vector<float> awq_group_hessians(const float* h, int64_t n, const std::vector<float>& s) {
  constexpr int64_t kGroup = 32;
  std::vector<float> out(static_cast<size_t>(n * kGroup));  // [n / 32][32][32]
  for (int64_t g = 0; g < n; g += kGroup)
    for (int64_t i = 0; i < kGroup; ++i)
      for (int64_t j = 0; j < kGroup; ++j)
        out[static_cast<size_t>(g * kGroup + i * kGroup + j)] =
            h[(g + i) * n + g + j] / (s[static_cast<size_t>(g + i)] * s[static_cast<size_t>(g + j)]);
  return out;
}

}  // namespace kestrel
