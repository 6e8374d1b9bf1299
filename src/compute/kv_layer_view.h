// Paged K/V of one layer: where each token's K and V rows lie in the pages, for every KV element type.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/kv_quant.h"

namespace kestrel {

// Pages ordered [kv_head][block] (a sequence whose blocks were allocated in order reads each head's pages
// as one stream). Per page (block) and KV head, for float element types:
//   K, row layout:        [block_size, k_dim]   (token rows)
//   K, transposed layout: [k_dim, block_size]   (one row per dimension: the keys of a page side by side,
//                                                 so attention scores a page with one vector op per dim)
//   V:                    [block_size, v_stride] of which the first v_dim are used.
// With latent attention (MLA) V is the first v_dim elements of each K row: v == k, v_stride == k_dim, K
// uses the row layout, and V has K's type. Elements are float, fp16 or bf16 bits. BF16 pages interleave
// pairs so one 32-bit lane holds two products' inputs: transposed K as [k_dim / 2, block_size, 2] (two
// dimensions of a key) and V as [block_size / 2, v_stride, 2] (one dimension of two keys).
// Quantized types (compute/kv_quant.h) put a page's codes first and its scales after them:
//   codes, transposed K: byte planes [k_dim / pack][block_size], pack = 8 / bits codes per byte (dimension
//                        p * pack + j in bits j * bits); tq3: a 2-bit plane [k_dim / 4][block_size] then a
//                        1-bit plane [k_dim / 8][block_size] of each code's high bit; q8_0: [k_dim / 4]
//                        [block_size][4] (four dimensions of a key side by side, one integer dot product)
//   codes, rows:         q8_0 (pages of an even number of tokens): [block_size / 2][dim][2], two keys'
//                        codes side by side (one 16-bit dot product); else [block_size][kv_code_bytes]
//                        per token; within each group of g values, 8-bit codes in order, 4-bit codes as byte b = value b (low nibble) and value b + g/2 (high),
//                        tq3 as g/4 bytes of 2-bit low parts (value x at bit 2x) then g/8 bytes of high
//                        bits (value x at bit x)
//   scales:              [groups][block_size] fp16, groups = dim / kv_group_size(dim)
// Rotated types store R x (compute/kv_rotation.h, seed rotation_seed); read_k / read_v undo it.
// Quantized K rows may be centered: with k_center set, a key row k is stored as k - k_center[kv_head] and
// read_k adds the center back. Every key a query meets in one attention call then carries the same shift,
// which moves all its scores by q . center, and softmax ignores that, so the page kernels read centered
// codes as they are (see model/key_centers.h for why and where the centers come from).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  KvTypes types;
  bool k_transposed = false;
  int block_size = 16;
  int n_kv_heads = 0;
  int k_dim = 0;
  int v_dim = 0;
  int v_stride = 0;
  int32_t n_blocks = 0;  // pages per KV head: each head's pages lie together, in block-id order
  uint32_t rotation_seed = 0;
  const float* k_center = nullptr;  // [n_kv_heads][k_dim] or null; used by quantized K types only

  bool v_in_k() const { return v == k; }
  KvType v_type() const { return v_in_k() ? types.k : types.v; }
  // Bytes of one (block, KV head) page, and the byte offset of a page from k / v.
  size_t k_page_bytes() const { return static_cast<size_t>(block_size) * kv_row_bytes(types.k, k_dim); }
  size_t v_page_bytes() const { return static_cast<size_t>(block_size) * kv_row_bytes(v_type(), v_stride); }
  size_t k_page_offset(int32_t block, int kv_head) const { return page(block, kv_head) * k_page_bytes(); }
  size_t v_page_offset(int32_t block, int kv_head) const { return page(block, kv_head) * v_page_bytes(); }
  // Element offsets inside a layer's K / V for float types.
  size_t k_element(int32_t block, int kv_head, int offset, int dim) const;
  size_t v_element(int32_t block, int kv_head, int offset, int dim) const;

  // Token `offset` of page (block, kv_head): encodes row[k_dim] / row[v_dim] into it (rotating and
  // quantizing as the type asks), or decodes it back (in the original basis).
  void write_k(int32_t block, int kv_head, int offset, const float* row) const;
  void write_v(int32_t block, int kv_head, int offset, const float* row) const;
  void read_k(int32_t block, int kv_head, int offset, float* row) const;
  void read_v(int32_t block, int kv_head, int offset, float* row) const;
  // One decoded element (reference code and tests; decodes the row).
  float k_at(int32_t block, int kv_head, int offset, int dim) const;
  float v_at(int32_t block, int kv_head, int offset, int dim) const;

 private:
  size_t page(int32_t block, int kv_head) const {
    return static_cast<size_t>(kv_head) * static_cast<size_t>(n_blocks) + static_cast<size_t>(block);
  }
  const float* key_center(int kv_head) const {
    return k_center && kv_type_quantized(types.k) ? k_center + static_cast<size_t>(kv_head) * k_dim : nullptr;
  }
  void write_row(bool key, int32_t block, int kv_head, int offset, const float* row) const;
  void read_row(bool key, int32_t block, int kv_head, int offset, float* row) const;
};

// Largest row the views encode or decode (latent attention's rows are the widest).
constexpr int kKvMaxRow = 2048;

}  // namespace kestrel
