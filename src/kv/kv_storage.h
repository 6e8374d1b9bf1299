// Page memory for every layer: per layer, K and V of shape [n_blocks, n_kv_heads, block_size, head_dim]
// floats. Block ids come from a BlockPool of the same n_blocks; this class only owns the bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/ops.h"

namespace kestrel {

struct KvCacheSpec {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int32_t n_blocks = 0;

  size_t bytes() const {
    return 2ull * n_layers * static_cast<size_t>(n_blocks) * n_kv_heads * block_size * head_dim * sizeof(float);
  }
};

class KvStorage {
 public:
  explicit KvStorage(const KvCacheSpec& spec);
  const KvCacheSpec& spec() const { return spec_; }
  KvLayerView layer(int il);

 private:
  KvCacheSpec spec_;
  std::vector<float> k_;  // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
  std::vector<float> v_;  // same
};

}  // namespace kestrel
