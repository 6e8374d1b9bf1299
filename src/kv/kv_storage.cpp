#include "kv/kv_storage.h"

namespace kestrel {

KvStorage::KvStorage(const KvCacheSpec& spec) : spec_(spec) {
  const size_t per_layer = static_cast<size_t>(spec.n_blocks) * spec.n_kv_heads * spec.block_size * spec.head_dim;
  k_.assign(per_layer * spec.n_layers, 0.f);
  v_.assign(per_layer * spec.n_layers, 0.f);
}

KvLayerView KvStorage::layer(int il) {
  const size_t per_layer = static_cast<size_t>(spec_.n_blocks) * spec_.n_kv_heads * spec_.block_size * spec_.head_dim;
  KvLayerView view;
  view.k = k_.data() + per_layer * il;
  view.v = v_.data() + per_layer * il;
  view.block_size = spec_.block_size;
  view.n_kv_heads = spec_.n_kv_heads;
  view.head_dim = spec_.head_dim;
  return view;
}

}  // namespace kestrel
