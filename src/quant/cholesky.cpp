#include "quant/cholesky.h"

#include <cmath>
#include <vector>

namespace kestrel {
namespace {

double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) s0 += a[k] * b[k], s1 += a[k + 1] * b[k + 1], s2 += a[k + 2] * b[k + 2], s3 += a[k + 3] * b[k + 3];
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

bool cholesky_lower(double* a, int64_t n) {
  // Row by row (Cholesky-Crout): row i needs only rows before it, and each entry is one contiguous dot.
  for (int64_t i = 0; i < n; ++i) {
    double* row = a + i * n;
    for (int64_t j = 0; j < i; ++j) {
      const double* rj = a + j * n;
      row[j] = (row[j] - dot(row, rj, j)) / rj[j];
    }
    const double diag = row[i] - dot(row, row, i);
    if (!(diag > 0.0) || !std::isfinite(diag)) return false;
    row[i] = std::sqrt(diag);
    for (int64_t j = i + 1; j < n; ++j) row[j] = 0.0;
  }
  return true;
}

void invert_lower(double* l, int64_t n) {
  // Column j of the inverse solves L x = e_j by forward substitution; x is zero above j. Working on the
  // transpose keeps each dot contiguous: t[j][k] = inverse[k][j].
  std::vector<double> t(static_cast<size_t>(n * n), 0.0);  // [n][n]
  for (int64_t j = 0; j < n; ++j) {
    double* x = t.data() + j * n;
    x[j] = 1.0 / l[j * n + j];
    for (int64_t k = j + 1; k < n; ++k) {
      const double* lk = l + k * n;
      x[k] = -dot(lk + j, x + j, k - j) / lk[k];
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) l[i * n + j] = j <= i ? t[static_cast<size_t>(j * n + i)] : 0.0;
}

}  // namespace kestrel
