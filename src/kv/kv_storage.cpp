#include "kv/kv_storage.h"

#include <cstring>
#include <stdexcept>

#include "compute/kv_rotation.h"
#include "core/large_buffer.h"

namespace kestrel {

size_t KvCacheSpec::heads_before(int il) const {
  if (layer_kv_heads.empty()) return static_cast<size_t>(il) * n_kv_heads;
  size_t heads = 0;
  for (int i = 0; i < il; ++i) heads += static_cast<size_t>(layer_kv_heads[static_cast<size_t>(i)]);
  return heads;
}

std::string KvCacheSpec::check() const {
  if (!layer_kv_heads.empty() && layer_kv_heads.size() != static_cast<size_t>(n_layers))
    return "per-layer KV heads: " + std::to_string(layer_kv_heads.size()) + " entries for " + std::to_string(n_layers) + " layers";
  if (v_in_k && types.v != types.k) return "latent attention caches one row per token: V has K's type";
  if (std::string why = kv_row_check(types.k, k_dim); !why.empty()) return why;
  if (!v_in_k)
    if (std::string why = kv_row_check(types.v, v_dim); !why.empty()) return why;
  if (kv_type_quantized(types.k) && k_dim > kKvMaxRow) return "quantized KV rows hold at most 2048 values";
  return {};
}

KvStorage::KvStorage(const KvCacheSpec& spec) : spec_(spec) {
  if (std::string why = spec.check(); !why.empty()) throw std::invalid_argument(why);
  k_ = allocate_large_buffer(spec.k_head_bytes() * spec.total_kv_heads());
  v_ = allocate_large_buffer(spec.v_head_bytes() * spec.total_kv_heads());
}

void KvStorage::copy_block(int32_t src, int32_t dst) {
  for (int il = 0; il < spec_.n_layers; ++il) {
    const KvLayerView view = layer(il);
    for (int h = 0; h < view.n_kv_heads; ++h) {
      auto* k = static_cast<uint8_t*>(view.k);
      std::memcpy(k + view.k_page_offset(dst, h), k + view.k_page_offset(src, h), view.k_page_bytes());
      if (spec_.v_in_k) continue;
      auto* v = static_cast<uint8_t*>(view.v);
      std::memcpy(v + view.v_page_offset(dst, h), v + view.v_page_offset(src, h), view.v_page_bytes());
    }
  }
}

namespace {
// Visits every (K or V) run of a page's bytes in export order: fn(address in storage, bytes).
template <typename Fn>
void for_page_parts(KvStorage& kv, int32_t page, Fn fn) {
  for (int il = 0; il < kv.spec().n_layers; ++il) {
    const KvLayerView view = kv.layer(il);
    for (int h = 0; h < view.n_kv_heads; ++h) {
      fn(static_cast<uint8_t*>(view.k) + view.k_page_offset(page, h), view.k_page_bytes());
      if (!kv.spec().v_in_k) fn(static_cast<uint8_t*>(view.v) + view.v_page_offset(page, h), view.v_page_bytes());
    }
  }
}
}  // namespace

size_t KvStorage::page_bytes() const {
  size_t n = 0;  // layer() only computes addresses
  for_page_parts(const_cast<KvStorage&>(*this), 0, [&](const uint8_t*, size_t bytes) { n += bytes; });
  return n;
}

void KvStorage::export_page(int32_t page, uint8_t* out) {
  for_page_parts(*this, page, [&](const uint8_t* at, size_t n) {
    std::memcpy(out, at, n);
    out += n;
  });
}

void KvStorage::import_page(int32_t page, const uint8_t* in) {
  for_page_parts(*this, page, [&](uint8_t* at, size_t n) {
    std::memcpy(at, in, n);
    in += n;
  });
}

void KvStorage::set_key_centers(std::vector<float> centers) {
  const size_t want = spec_.total_kv_heads() * spec_.k_dim;
  if (!centers.empty() && centers.size() != want)
    throw std::invalid_argument("key centers: " + std::to_string(centers.size()) + " values for a cache of " +
                                std::to_string(want));
  key_centers_ = std::move(centers);
}

KvLayerView KvStorage::layer(int il) {
  KvLayerView view;
  const size_t heads_before = spec_.heads_before(il);
  view.k = k_.get() + spec_.k_head_bytes() * heads_before;
  view.v = spec_.v_in_k ? view.k : v_.get() + spec_.v_head_bytes() * heads_before;
  view.types = spec_.types;
  view.k_transposed = !spec_.v_in_k;
  view.block_size = spec_.block_size;
  view.n_kv_heads = spec_.kv_heads(il);
  view.n_blocks = spec_.n_blocks;
  view.k_dim = spec_.k_dim;
  view.v_dim = spec_.v_dim;
  view.v_stride = spec_.v_in_k ? spec_.k_dim : spec_.v_dim;
  view.rotation_seed = kv_rotation_seed(il);
  if (!key_centers_.empty())
    view.k_center = key_centers_.data() + heads_before * spec_.k_dim;
  return view;
}

}  // namespace kestrel
