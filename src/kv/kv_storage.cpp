#include "kv/kv_storage.h"

namespace kestrel {

KvStorage::KvStorage(const KvCacheSpec& spec) : spec_(spec) {
  k_.assign(spec.elements_per_layer_k() * spec.n_layers * spec.element_bytes(), 0);
  v_.assign(spec.elements_per_layer_v() * spec.n_layers * spec.element_bytes(), 0);
}

KvLayerView KvStorage::layer(int il) {
  KvLayerView view;
  view.k = k_.data() + spec_.elements_per_layer_k() * spec_.element_bytes() * il;
  view.v = spec_.v_in_k ? view.k : v_.data() + spec_.elements_per_layer_v() * spec_.element_bytes() * il;
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
