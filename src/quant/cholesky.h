// Dense Cholesky factorisation and triangular inversion for the symmetric positive-definite matrices of
// calibration (Hessians X^T X of a layer's inputs, quant/gptq.h). Row-major, double precision, in place.
#pragma once
#include <cstdint>

namespace kestrel {

// a [n][n] symmetric (only its lower triangle is read) <- L, lower triangular with a positive diagonal,
// a = L L^T; the strict upper triangle is set to zero. Returns false (a partly overwritten) when a is not
// positive definite.
bool cholesky_lower(double* a, int64_t n);

// l [n][n] lower triangular with a nonzero diagonal <- its inverse (also lower triangular).
void invert_lower(double* l, int64_t n);

}  // namespace kestrel
