// The element types that tensors in model files use, with their block geometry.
// Ids are GGUF's (ggml_type) so a file's type field maps directly; kestrel's own types sit from 4096 up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  I8 = 24,   // plain int8 elements: W8A8 weights, with per-row scales in a companion tensor (compute/ops.h)
  I32 = 26,  // plain int32 elements: W8A8's outlier channel indices
  BF16 = 30,
  // kestrel's own types: ids far above GGUF's (which end in the 40s), so no GGUF reader mistakes them.
  FP8_E4M3 = 4096,  // blocks of 32 FP8 E4M3 codes with an F16 scale (quant/blocks.h: BlockFP8)
  // 2:4 sparse blocks of 64 inputs: 32 kept values (F16, a Q8_0 block, a Q4_0 block) and 2-bit positions
  // (quant/sparse24.h)
  S24_F16 = 4097,
  S24_Q8 = 4098,
  S24_Q4 = 4099,
};

struct DTypeTraits {
  DType type;
  const char* name;
  uint32_t block_elems;  // elements per block (1 for plain floats)
  uint32_t block_bytes;  // bytes per block
};

// Traits for a supported type, or nullopt for an id this build does not support.
std::optional<DTypeTraits> dtype_traits(uint32_t raw_type);
const DTypeTraits& dtype_traits(DType type);
const char* dtype_name(DType type);
// Parses "f32", "q4_0", "Q4_K", ... (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);
// Bytes a row of n elements takes; n must be a multiple of the block size (checked by callers).
inline size_t row_bytes(DType type, size_t n) {
  const auto& t = dtype_traits(type);
  return n / t.block_elems * t.block_bytes;
}

}  // namespace kestrel
