// Dense linear algebra for calibration-aware quantization: Cholesky factorisation and triangular inversion
// of the symmetric positive-definite Hessians X^T X of a layer's inputs (quant/gptq.h; row-major, double
// precision, in place), and the vector update the column-by-column quantizers run. Vectorised for the CPU
// it runs on (core/simd_clones.h).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"

namespace kestrel {

// a [n][n] symmetric (only its lower triangle is read) <- L, lower triangular with a positive diagonal,
// a = L L^T; the strict upper triangle is set to zero. Returns false (a partly overwritten) when a is not
// positive definite. Rows are shared out over the pool.
bool cholesky_lower(double* a, int64_t n, ThreadPool& pool);

// l [n][n] lower triangular with a nonzero diagonal <- its inverse (also lower triangular).
void invert_lower(double* l, int64_t n, ThreadPool& pool);

// y[i] += a * x[i] for i < n.
void axpy(float a, const float* x, float* y, int64_t n);

// sum_i a[i] * b[i] for i < n (in 16 partial sums: the order differs from a plain loop's).
float dot(const float* a, const float* b, int64_t n);

// sum over r < rows of x_r^T H x_r, x [rows][n], h [n][n] (symmetric or not: the plain quadratic form).
// The threads share H's rows out in blocks that stay in cache while every x_r passes, so H is read from
// memory once, not once per r.
double quadratic_form_sum(const float* h, int64_t n, const float* x, int64_t rows, ThreadPool& pool);

}  // namespace kestrel
