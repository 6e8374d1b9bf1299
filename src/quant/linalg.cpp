#include "quant/linalg.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/simd_clones.h"

namespace kestrel {
namespace {

constexpr int kRows = 4;  // rows (or columns) sharing each pass over the other operand (dots below)

// out[r] = sum_{k < n} a[r][k] * b[k] for kRows = 4 rows a[r]: b is read once for all of them. Eight
// partial sums per row in arrays, so the compiler vectorises without reassociating a single sum.
KESTREL_SIMD_CLONES void dots(const double* const* a, const double* b, int64_t n, double* out) {
  const double *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  double s0[8] = {}, s1[8] = {}, s2[8] = {}, s3[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int l = 0; l < 8; ++l) s0[l] += a0[k + l] * b[k + l];
    for (int l = 0; l < 8; ++l) s1[l] += a1[k + l] * b[k + l];
    for (int l = 0; l < 8; ++l) s2[l] += a2[k + l] * b[k + l];
    for (int l = 0; l < 8; ++l) s3[l] += a3[k + l] * b[k + l];
  }
  double* sums[kRows] = {s0, s1, s2, s3};
  for (int r = 0; r < kRows; ++r) {
    double t = 0;
    for (int l = 0; l < 8; ++l) t += sums[r][l];
    for (int64_t m = k; m < n; ++m) t += a[r][m] * b[m];
    out[r] = t;
  }
}

}  // namespace

bool cholesky_lower(double* a, int64_t n, ThreadPool& pool) {
  // Row-oriented Cholesky-Crout in blocks of rows: L_ij = (a_ij - L_i[:j] . L_j[:j]) / L_jj. Within a block,
  // the entries left of the block's first row depend only on finished rows and on their own row's earlier
  // entries, so the block's rows are shared out over the pool (kRows at a time, each finished row read
  // once for them); the block's own triangle is then finished row by row.
  constexpr int64_t kBlock = 64;
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t i1 = std::min(n, i0 + kBlock);
    pool.parallel_for_dynamic(static_cast<size_t>((i1 - i0 + kRows - 1) / kRows), 1, [&](size_t first, size_t last, int) {
      for (size_t g = first; g < last; ++g) {
        const int64_t r0 = i0 + static_cast<int64_t>(g) * kRows;
        const int rows = static_cast<int>(std::min<int64_t>(kRows, i1 - r0));
        double* row[kRows];
        for (int r = 0; r < kRows; ++r) row[r] = a + std::min(r0 + r, i1 - 1) * n;  // padding repeats a row
        double s[kRows];
        for (int64_t j = 0; j < i0; ++j) {
          const double* rj = a + j * n;
          dots(row, rj, j, s);
          for (int r = 0; r < rows; ++r) row[r][j] = (row[r][j] - s[r]) / rj[j];
        }
      }
    });
    for (int64_t i = i0; i < i1; ++i) {
      double* row = a + i * n;
      for (int64_t j = i0; j <= i; ++j) {
        const double* rj = a + j * n;
        double s = 0;
        for (int64_t k = 0; k < j; ++k) s += row[k] * rj[k];
        if (j < i) {
          row[j] = (row[j] - s) / rj[j];
        } else {
          const double diag = row[i] - s;
          if (!(diag > 0.0) || !std::isfinite(diag)) return false;
          row[i] = std::sqrt(diag);
        }
      }
      std::fill(row + i + 1, row + n, 0.0);
    }
  }
  return true;
}

void invert_lower(double* l, int64_t n, ThreadPool& pool) {
  // Column j of the inverse solves L x = e_j by forward substitution (x is zero above j); columns are
  // independent, so groups of kRows of them go to the pool, each row of L read once per group. t holds
  // the columns as rows: t[j][k] = inverse[k][j].
  std::vector<double> t(static_cast<size_t>(n * n), 0.0);  // [n][n]
  const std::vector<double> zeros(static_cast<size_t>(n), 0.0);  // [n] the columns padding the last group
  pool.parallel_for_dynamic(static_cast<size_t>((n + kRows - 1) / kRows), 1, [&](size_t first, size_t last, int) {
    for (size_t g = first; g < last; ++g) {
      const int64_t j0 = static_cast<int64_t>(g) * kRows;
      const int cols = static_cast<int>(std::min<int64_t>(kRows, n - j0));
      const double* x[kRows];
      for (int c = 0; c < kRows; ++c) x[c] = c < cols ? t.data() + (j0 + c) * n + j0 : zeros.data();
      for (int c = 0; c < cols; ++c) {
        double* xc = t.data() + (j0 + c) * n;
        xc[j0 + c] = 1.0 / l[(j0 + c) * n + j0 + c];
        for (int64_t k = j0 + c + 1; k < j0 + cols; ++k) {  // the group's own triangle
          double s = 0;
          for (int64_t m = j0 + c; m < k; ++m) s += l[k * n + m] * xc[m];
          xc[k] = -s / l[k * n + k];
        }
      }
      double s[kRows];
      for (int64_t k = j0 + cols; k < n; ++k) {
        const double* lk = l + k * n;
        dots(x, lk + j0, k - j0, s);  // entries of x above each column's own index are zero
        for (int c = 0; c < cols; ++c) t[static_cast<size_t>((j0 + c) * n + k)] = -s[c] / lk[k];
      }
    }
  });
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) l[i * n + j] = j <= i ? t[static_cast<size_t>(j * n + i)] : 0.0;
}

KESTREL_SIMD_CLONES void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

KESTREL_SIMD_CLONES float dot(const float* a, const float* b, int64_t n) {
  float s[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) s[l] += a[i + l] * b[i + l];
  float total = 0;
  for (; i < n; ++i) total += a[i] * b[i];
  for (const float v : s) total += v;
  return total;
}

double quadratic_form_sum(const float* h, int64_t n, const float* x, int64_t rows, ThreadPool& pool) {
  constexpr size_t kBlockBytes = 256 * 1024;  // of H's rows per task: within a core's L2
  const size_t block_rows = std::max<size_t>(1, kBlockBytes / (sizeof(float) * static_cast<size_t>(n)));
  std::vector<double> partial(static_cast<size_t>(pool.n_threads()), 0.0);  // [threads]
  pool.parallel_for_dynamic(static_cast<size_t>(n), block_rows, [&](size_t begin, size_t end, int thread) {
    double sum = 0;
    for (size_t a0 = begin; a0 < end; a0 += block_rows) {
      const size_t a1 = std::min(end, a0 + block_rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        for (size_t a = a0; a < a1; ++a)
          if (xr[a] != 0.0f) sum += static_cast<double>(xr[a]) * dot(h + static_cast<int64_t>(a) * n, xr, n);
      }
    }
    partial[static_cast<size_t>(thread)] += sum;
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

}  // namespace kestrel
