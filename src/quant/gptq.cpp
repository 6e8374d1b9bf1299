#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "quant/block_grid.h"
#include "quant/linalg.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

// U [n][n] (upper triangular) with U^T U = H^-1, H [n][n] given in the order `perm` visits columns, damped.
// With J the order-reversing permutation, chol(J H J) = M gives H^-1 = (J M^-1 J)^T (J M^-1 J) and J M^-1 J
// is upper triangular: one factorisation and one triangular inverse.
bool inverse_factor(const float* h, const std::vector<int64_t>& perm, double damp, std::vector<float>& u, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(perm.size());
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h[i * n + i];
  mean_diag = mean_diag > 0 ? mean_diag / static_cast<double>(n) : 1.0;
  std::vector<double> m(static_cast<size_t>(n * n));  // [n][n] J H J, then its factor, then the factor's inverse
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pi = perm[static_cast<size_t>(n - 1 - i)];
    for (int64_t j = 0; j <= i; ++j) {
      double v = h[pi * n + perm[static_cast<size_t>(n - 1 - j)]];
      if (i == j) v = (v > 0 ? v : mean_diag) + damp * mean_diag;  // dead inputs: any positive diagonal
      m[static_cast<size_t>(i * n + j)] = v;
    }
  }
  if (!cholesky_lower(m.data(), n, pool)) return false;
  invert_lower(m.data(), n, pool);
  u.assign(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) u[static_cast<size_t>(i * n + j)] = static_cast<float>(m[static_cast<size_t>((n - 1 - i) * n + (n - 1 - j))]);
  return true;
}

// One tile of rows, quantized together so that each row of U is read once per tile.
struct RowTile {
  int64_t rows;
  std::vector<float> w;         // [rows][n_in] weights in visiting order, updated as columns are quantized
  std::vector<float> step;      // [rows][n_in] grid of each weight, by original column
  std::vector<float> offset;    // [rows][n_in]
  std::vector<uint8_t> codes;   // [rows][n_in] by original column
  std::vector<float> errors;    // [rows][batch] scaled errors of the current batch
};

}  // namespace

Status gptq_quantize(DType type, const float* w, int64_t n_out, int64_t n_in, const float* h, const GptqOptions& options,
                     uint8_t* out, ThreadPool& pool) {
  const int64_t bs = dtype_traits(type).block_elems;
  const size_t out_row = row_bytes(type, static_cast<size_t>(n_in)), block_bytes = dtype_traits(type).block_bytes;
  const int levels = grid_levels(type);
  std::vector<float> importance(static_cast<size_t>(n_in));  // [n_in] diag(H)
  std::vector<int64_t> perm(static_cast<size_t>(n_in));      // [n_in] visiting order -> original column
  for (int64_t j = 0; j < n_in; ++j) importance[static_cast<size_t>(j)] = std::max(h[j * n_in + j], 0.0f);
  std::iota(perm.begin(), perm.end(), 0);
  if (options.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return importance[static_cast<size_t>(a)] > importance[static_cast<size_t>(b)]; });

  std::vector<float> u;  // [n_in][n_in]
  double damp = options.damp;
  while (!inverse_factor(h, perm, damp, u, pool)) {
    damp *= 10;
    if (damp > options.damp * 1000 + 1e-9) return Error{"GPTQ: the input Hessian is not positive definite"};
  }

  const int64_t batch = std::max<int64_t>(bs, options.batch_columns / bs * bs);
  constexpr int64_t kTileRows = 16;
  pool.parallel_for_dynamic(static_cast<size_t>((n_out + kTileRows - 1) / kTileRows), 1, [&](size_t first, size_t last, int) {
    RowTile t;
    for (size_t tile = first; tile < last; ++tile) {
      const int64_t r0 = static_cast<int64_t>(tile) * kTileRows;
      t.rows = std::min(kTileRows, n_out - r0);
      const size_t cells = static_cast<size_t>(t.rows * n_in);
      t.w.resize(cells), t.step.resize(cells), t.offset.resize(cells), t.codes.resize(cells);
      t.errors.assign(static_cast<size_t>(t.rows * batch), 0.0f);
      const auto fit_block = [&](int64_t r, int64_t block, const float* x) {
        uint8_t* b = out + static_cast<size_t>(r0 + r) * out_row + static_cast<size_t>(block) * block_bytes;
        quantize_row_weighted(type, x, b, static_cast<size_t>(bs), importance.data() + block * bs);
        const BlockGrid g = block_grid(type, b);
        std::copy_n(g.step, bs, t.step.data() + r * n_in + block * bs);
        std::copy_n(g.offset, bs, t.offset.data() + r * n_in + block * bs);
      };
      for (int64_t r = 0; r < t.rows; ++r) {
        const float* src = w + (r0 + r) * n_in;
        float* dst = t.w.data() + r * n_in;
        for (int64_t p = 0; p < n_in; ++p) dst[p] = importance[static_cast<size_t>(perm[static_cast<size_t>(p)])] > 0 ? src[perm[static_cast<size_t>(p)]] : 0.0f;
        if (options.act_order)
          for (int64_t block = 0; block < n_in / bs; ++block) fit_block(r, block, src + block * bs);
      }
      for (int64_t b0 = 0; b0 < n_in; b0 += batch) {
        const int64_t b1 = std::min(n_in, b0 + batch);
        for (int64_t r = 0; r < t.rows; ++r) {
          float* x = t.w.data() + r * n_in;
          float* e = t.errors.data() + r * batch;
          for (int64_t p = b0; p < b1; ++p) {
            const int64_t c = perm[static_cast<size_t>(p)];
            if (!options.act_order && c % bs == 0) fit_block(r, c / bs, x + p);
            const size_t at = static_cast<size_t>(r * n_in + c);
            const float s = t.step[at], o = t.offset[at];
            const uint8_t q = grid_code(s, o, levels, x[p]);
            t.codes[at] = q;
            const float* up = u.data() + p * n_in;
            const float err = (x[p] - (s * static_cast<float>(q) + o)) / up[p];
            e[p - b0] = err;
            axpy(-err, up + p + 1, x + p + 1, b1 - p - 1);
          }
        }
        for (int64_t k = 0; k < b1 - b0; ++k) {
          const float* up = u.data() + (b0 + k) * n_in;
          for (int64_t r = 0; r < t.rows; ++r) {
            const float err = t.errors[static_cast<size_t>(r * batch + k)];
            float* x = t.w.data() + r * n_in;
            axpy(-err, up + b1, x + b1, n_in - b1);
          }
        }
      }
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t block = 0; block < n_in / bs; ++block)
          set_block_codes(type, out + static_cast<size_t>(r0 + r) * out_row + static_cast<size_t>(block) * block_bytes,
                          t.codes.data() + r * n_in + block * bs);
    }
  });
  return Status{};
}

}  // namespace kestrel
