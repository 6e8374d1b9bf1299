// Row dot products: one weight row (any supported type, n elements) against a float activation vector.
// These are the decode kernels; matmul builds on them. Each ISA has a table; types an ISA does not
// specialise fall back to the next level down.
#pragma once
#include <cstddef>

#include "compute/cpu/isa.h"
#include "core/dtype.h"

namespace kestrel {

// Returns sum_i w[i] * x[i] where w is `row` decoded as its type. n is a multiple of the block size.
using DotFn = float (*)(const void* row, const float* x, size_t n);

DotFn dot_kernel(DType type, Isa isa);
inline DotFn dot_kernel(DType type) { return dot_kernel(type, detected_isa()); }

// Per-ISA tables (nullptr for a type the level does not specialise).
DotFn dot_kernel_scalar(DType type);
DotFn dot_kernel_avx2(DType type);
DotFn dot_kernel_avx512(DType type);

}  // namespace kestrel
