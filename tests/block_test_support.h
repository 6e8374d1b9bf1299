// Helpers of the kernel and quantization-format tests: the block types, and rows quantized to a type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "quant/quantize.h"

namespace kestrel::test {

// The quantized GGUF block types (integer row dots and packed layouts) and the 2:4 integer types.
inline constexpr DType kBlockTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,  DType::Q2_K,
                                        DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::S24_Q8, DType::S24_Q4};

// values [rows][n_in] quantized row by row to `type`: [rows][row_bytes(type, n_in)].
inline std::vector<uint8_t> quantized(DType type, const std::vector<float>& values, size_t n_in) {
  std::vector<uint8_t> bytes(row_bytes(type, n_in) * (values.size() / n_in));
  for (size_t r = 0; r < values.size() / n_in; ++r)
    quantize_row(type, values.data() + r * n_in, bytes.data() + r * row_bytes(type, n_in), n_in);
  return bytes;
}

}  // namespace kestrel::test
