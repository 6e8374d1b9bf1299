#include "kv/kv_storage.h"

#include <cstring>

#include "core/large_buffer.h"

namespace kestrel {

KvStorage::KvStorage(const KvCacheSpec& spec) : spec_(spec) {
  k_ = allocate_large_buffer(spec.elements_per_layer_k() * spec.n_layers * spec.element_bytes());
  v_ = allocate_large_buffer(spec.elements_per_layer_v() * spec.n_layers * spec.element_bytes());
}

void KvStorage::copy_block(int32_t src, int32_t dst) {
  for (int il = 0; il < spec_.n_layers; ++il) {
    const KvLayerView view = layer(il);
    const size_t k_bytes = static_cast<size_t>(spec_.block_size) * spec_.k_dim * spec_.element_bytes();
    const size_t v_bytes = static_cast<size_t>(spec_.block_size) * view.v_stride * spec_.element_bytes();
    for (int h = 0; h < spec_.n_kv_heads; ++h) {
      auto* k = static_cast<uint8_t*>(view.k);
      std::memcpy(k + view.k_page(dst, h) * spec_.element_bytes(), k + view.k_page(src, h) * spec_.element_bytes(),
                  k_bytes);
      if (spec_.v_in_k) continue;
      auto* v = static_cast<uint8_t*>(view.v);
      std::memcpy(v + view.v_page(dst, h) * spec_.element_bytes(), v + view.v_page(src, h) * spec_.element_bytes(),
                  v_bytes);
    }
  }
}

KvLayerView KvStorage::layer(int il) {
  KvLayerView view;
  view.k = k_.get() + spec_.elements_per_layer_k() * spec_.element_bytes() * il;
  view.v = spec_.v_in_k ? view.k : v_.get() + spec_.elements_per_layer_v() * spec_.element_bytes() * il;
  view.type = spec_.type;
  view.k_transposed = !spec_.v_in_k;
  view.block_size = spec_.block_size;
  view.n_kv_heads = spec_.n_kv_heads;
  view.n_blocks = spec_.n_blocks;
  view.k_dim = spec_.k_dim;
  view.v_dim = spec_.v_dim;
  view.v_stride = spec_.v_in_k ? spec_.k_dim : spec_.v_dim;
  return view;
}

}  // namespace kestrel
