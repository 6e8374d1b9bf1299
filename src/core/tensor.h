// A non-owning view of a tensor's bytes (usually inside a memory-mapped model file).
// Shapes follow GGUF/ggml order: ne[0] is the innermost (contiguous) dimension, so a weight matrix
// with ne = {n_in, n_out} holds n_out rows of n_in elements.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace kestrel {

struct TensorView {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return kestrel::row_bytes(type, static_cast<size_t>(ne[0])); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
  std::string shape_string() const;
};

}  // namespace kestrel
