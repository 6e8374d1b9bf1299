// Reference (scalar) conversion between float rows and every supported weight type.
// These are the executable spec of each block format: fast kernels are tested against dequantize_row.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kestrel {

// out[n] <- row in `type` (n a multiple of the type's block size).
void dequantize_row(DType type, const void* row, float* out, size_t n);
// row in `type` <- in[n]. Quantizers aim for low error, not bit-equality with other tools.
void quantize_row(DType type, const float* in, void* row, size_t n);

}  // namespace kestrel
