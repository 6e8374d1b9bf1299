// Page memory for every layer. Per layer and page, K and V of each KV head as KvLayerView describes
// (float elements or quantized codes and scales; K pages transposed for standard attention). For latent attention (MLA) V is not
// stored separately: each token caches one latent row of k_dim elements whose first v_dim serve as its value.
// Block ids come from a BlockPool of the same n_blocks; this class only owns the bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/ops.h"

namespace kestrel {

struct KvCacheSpec {
  int n_layers = 0;
  int n_kv_heads = 0;                // in every layer, unless layer_kv_heads says otherwise (then the largest)
  std::vector<int> layer_kv_heads;   // [n_layers] KV heads of each layer, or empty (structured-pruned models
                                     // may have fewer in some layers: their pages are sized per layer)
  int k_dim = 0;        // elements per token per KV head for keys (MLA: kv_lora_rank + rope dims)
  int v_dim = 0;        // elements per token per KV head for values (MLA: kv_lora_rank)
  bool v_in_k = false;  // MLA: values are the first v_dim elements of the key row (and have K's type)
  KvTypes types = KvType::F32;
  int block_size = 16;
  int32_t n_blocks = 0;

  int kv_heads(int il) const { return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[static_cast<size_t>(il)]; }
  // KV heads of the layers before il (where layer il's pages and key centers start).
  size_t heads_before(int il) const;
  size_t total_kv_heads() const { return heads_before(n_layers); }
  // Bytes of one token's K row and V row of one KV head in one layer.
  size_t k_row_bytes() const { return kv_row_bytes(types.k, k_dim); }
  size_t v_row_bytes() const { return v_in_k ? 0 : kv_row_bytes(types.v, v_dim); }
  // Bytes of all K (V) pages of one KV head.
  size_t k_head_bytes() const { return static_cast<size_t>(n_blocks) * block_size * k_row_bytes(); }
  size_t v_head_bytes() const { return static_cast<size_t>(n_blocks) * block_size * v_row_bytes(); }
  size_t bytes() const { return total_kv_heads() * (k_head_bytes() + v_head_bytes()); }
  // KV bytes one token occupies over all layers and KV heads (K, and V unless it lives in K).
  size_t bytes_per_token() const { return total_kv_heads() * (k_row_bytes() + v_row_bytes()); }
  // Empty when the types can store this model's rows, else why not.
  std::string check() const;
};

class KvStorage {
 public:
  // Throws std::invalid_argument when spec.check() fails.
  explicit KvStorage(const KvCacheSpec& spec);
  const KvCacheSpec& spec() const { return spec_; }
  KvLayerView layer(int il);
  // Copies every position of page src into page dst, in every layer and KV head (copy-on-write, and
  // prefix-cache hits that end inside a page).
  void copy_block(int32_t src, int32_t dst);
  // One page's bytes over every layer and KV head: what export_page writes and import_page reads
  // (prefill/decode disaggregation moves pages between processes with the same spec and key centers).
  size_t page_bytes() const;
  // out[page_bytes()] <- page's K/V, layer by layer, head by head (K, then V unless it lives in K).
  void export_page(int32_t page, uint8_t* out);
  // page's K/V <- in[page_bytes()] as export_page wrote it.
  void import_page(int32_t page, const uint8_t* in);
  // Centers subtracted from keys before a quantized K type stores them ([layer][kv_heads(layer)][k_dim];
  // empty: none; see KvLayerView::k_center). Set them before the first write: pages written with other
  // centers would decode wrongly. Throws std::invalid_argument on a wrong size.
  void set_key_centers(std::vector<float> centers);
  bool keys_centered() const { return !key_centers_.empty(); }

 private:
  KvCacheSpec spec_;
  // Huge-page backed (core/large_buffer.h): every decode step streams a sequence's pages of every layer.
  std::shared_ptr<uint8_t[]> k_;  // [layer][kv_heads(layer)][n_blocks][page of K]
  std::shared_ptr<uint8_t[]> v_;  // [layer][kv_heads(layer)][n_blocks][page of V]; unused when v_in_k
  std::vector<float> key_centers_;  // [layer][kv_heads(layer)][k_dim] or empty
};

}  // namespace kestrel
