#include "compute/kv_layer_view.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>

#include "compute/kv_rotation.h"
#include "core/fp16.h"

namespace kestrel {
namespace {

float load_element(KvType t, const void* base, size_t i) {
  switch (t) {
    case KvType::F32: return static_cast<const float*>(base)[i];
    case KvType::F16: return fp16_to_fp32(static_cast<const uint16_t*>(base)[i]);
    case KvType::BF16: return bf16_to_fp32(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0f;
  }
}

// Where a float row's values lie in a layer's K or V: value i at element first + (i / 2) * pair_step +
// (i % 2) * odd_step. Every float page layout (kv_layer_view.h) places a row's values so.
struct RowPlace {
  size_t first, odd_step, pair_step;
  size_t operator()(int i) const { return first + static_cast<size_t>(i / 2) * pair_step + static_cast<size_t>(i % 2) * odd_step; }
};
template <typename Element>
RowPlace row_place(Element element) {
  const size_t first = element(0);
  return {first, element(1) - first, element(2) - first};
}

template <typename T, typename Convert>
void store_row(void* base, RowPlace place, const float* row, int dim, Convert convert) {
  T* out = static_cast<T*>(base);
  for (int i = 0; i < dim; ++i) out[place(i)] = convert(row[i]);
}
template <typename T, typename Convert>
void load_row(const void* base, RowPlace place, float* row, int dim, Convert convert) {
  const T* in = static_cast<const T*>(base);
  for (int i = 0; i < dim; ++i) row[i] = convert(in[place(i)]);
}

// code_values(t)[code] = kv_code_value(t, code), for every byte.
const float* code_values(KvType t) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, std::size(kAllKvTypes)> all{};
    for (KvType type : kAllKvTypes)
      if (kv_type_quantized(type))
        for (int c = 0; c < 256; ++c) all[static_cast<size_t>(type)][static_cast<size_t>(c)] = kv_code_value(type, static_cast<uint8_t>(c));
    return all;
  }();
  return tables[static_cast<size_t>(t)].data();
}

// Calls f(byte, shift, width, code_shift) for each bit field holding part of the code of value i of token
// `offset` in a page's code region (layouts in kv_layer_view.h): bits [shift, shift + width) of that byte
// are bits [code_shift, code_shift + width) of the code.
template <typename F>
void for_code_fields(KvType t, int bits, int dim, bool transposed, int bs, int offset, int i, F f) {
  const size_t b = static_cast<size_t>(bs);
  if (transposed) {
    if (t == KvType::TQ3) {
      f(static_cast<size_t>(i / 4) * b + offset, 2 * (i % 4), 2, 0);
      f(static_cast<size_t>(dim / 4 + i / 8) * b + offset, i % 8, 1, 2);
    } else if (t == KvType::Q8_0) {  // four dimensions of a key together, for 4-byte integer dot products
      f((static_cast<size_t>(i / 4) * b + offset) * 4 + i % 4, 0, 8, 0);
    } else {
      const int pack = 8 / bits;
      f(static_cast<size_t>(i / pack) * b + offset, bits * (i % pack), bits, 0);
    }
    return;
  }
  if (t == KvType::Q8_0 && bs % 2 == 0) {  // two keys side by side per value, for 16-bit dot products
    f((static_cast<size_t>(offset / 2) * dim + i) * 2 + offset % 2, 0, 8, 0);
    return;
  }
  const int g = kv_group_size(dim), x = i % g;
  const size_t group = static_cast<size_t>(offset) * kv_code_bytes(t, dim) + (i / g) * kv_code_bytes(t, g);
  if (t == KvType::TQ3) {
    f(group + 2 * x / 8, 2 * x % 8, 2, 0);
    f(group + g / 4 + x / 8, x % 8, 1, 2);
  } else if (bits == 4) {
    f(group + x % (g / 2), 4 * (x / (g / 2)), 4, 0);
  } else {
    f(group + x, 0, 8, 0);
  }
}

// Encodes or decodes one quantized row of `dim` values at token `offset` of a page.
void write_quantized(KvType t, uint8_t* page, int dim, bool transposed, int bs, int offset, const float* x) {
  uint8_t codes[kKvMaxRow];
  uint16_t scales[kKvMaxRow];
  kv_quantize_row(t, x, dim, codes, scales);
  const int bits = kv_type_bits(t);
  for (int i = 0; i < dim; ++i)
    for_code_fields(t, bits, dim, transposed, bs, offset, i, [&](size_t byte, int shift, int width, int code_shift) {
      const unsigned mask = (1u << width) - 1u;
      const unsigned part = (static_cast<unsigned>(codes[i]) >> code_shift) & mask;
      page[byte] = static_cast<uint8_t>((page[byte] & ~(mask << shift)) | (part << shift));
    });
  uint8_t* scale_region = page + static_cast<size_t>(bs) * kv_code_bytes(t, dim);
  const int g = kv_group_size(dim);
  for (int group = 0; group < dim / g; ++group)
    std::memcpy(scale_region + 2 * (static_cast<size_t>(group) * bs + offset), &scales[group], 2);
}

void read_quantized(KvType t, const uint8_t* page, int dim, bool transposed, int bs, int offset, float* x) {
  const uint8_t* scale_region = page + static_cast<size_t>(bs) * kv_code_bytes(t, dim);
  const int g = kv_group_size(dim), bits = kv_type_bits(t);
  const float* value = code_values(t);
  for (int group = 0, i = 0; group < dim / g; ++group) {
    uint16_t scale_bits;
    std::memcpy(&scale_bits, scale_region + 2 * (static_cast<size_t>(group) * bs + offset), 2);
    const float scale = fp16_to_fp32(scale_bits);
    for (const int end = i + g; i < end; ++i) {
      unsigned code = 0;
      for_code_fields(t, bits, dim, transposed, bs, offset, i, [&](size_t byte, int shift, int width, int code_shift) {
        code |= ((static_cast<unsigned>(page[byte]) >> shift) & ((1u << width) - 1u)) << code_shift;
      });
      x[i] = value[code & 255] * scale;
    }
  }
}

}  // namespace

size_t KvLayerView::k_element(int32_t block, int kv_head, int offset, int dim) const {
  const size_t base = page(block, kv_head) * static_cast<size_t>(block_size) * k_dim;
  if (!k_transposed) return base + static_cast<size_t>(offset) * k_dim + dim;
  if (types.k == KvType::BF16) return base + (static_cast<size_t>(dim / 2) * block_size + offset) * 2 + dim % 2;
  return base + static_cast<size_t>(dim) * block_size + offset;
}

size_t KvLayerView::v_element(int32_t block, int kv_head, int offset, int dim) const {
  const size_t base = page(block, kv_head) * static_cast<size_t>(block_size) * v_stride;
  if (v_type() == KvType::BF16 && !v_in_k())
    return base + (static_cast<size_t>(offset / 2) * v_stride + dim) * 2 + offset % 2;
  return base + static_cast<size_t>(offset) * v_stride + dim;
}

void KvLayerView::write_row(bool key, int32_t block, int kv_head, int offset, const float* row) const {
  const KvType t = key ? types.k : types.v;
  const int dim = key ? k_dim : v_dim;
  if (!kv_type_quantized(t)) {
    const RowPlace place = row_place([&](int i) { return key ? k_element(block, kv_head, offset, i) : v_element(block, kv_head, offset, i); });
    void* base = key ? k : v;
    switch (t) {
      case KvType::F32: return store_row<float>(base, place, row, dim, [](float x) { return x; });
      case KvType::F16: return store_row<uint16_t>(base, place, row, dim, fp32_to_fp16);
      case KvType::BF16: return store_row<uint16_t>(base, place, row, dim, fp32_to_bf16);
      default: return;
    }
  }
  float prepared[kKvMaxRow];  // [dim] the row centered and rotated as the type asks
  const float* center = key ? key_center(kv_head) : nullptr;
  if (center || kv_type_rotated(t)) {
    for (int i = 0; i < dim; ++i) prepared[i] = center ? row[i] - center[i] : row[i];
    if (kv_type_rotated(t)) kv_rotate(prepared, dim, rotation_seed);
    row = prepared;
  }
  uint8_t* base = static_cast<uint8_t*>(key ? k : v) + (key ? k_page_offset(block, kv_head) : v_page_offset(block, kv_head));
  write_quantized(t, base, dim, key && k_transposed, block_size, offset, row);
}

void KvLayerView::read_row(bool key, int32_t block, int kv_head, int offset, float* row) const {
  const KvType t = key ? types.k : v_type();
  if (!key && v_in_k()) {  // the first v_dim values of the K row
    float full[kKvMaxRow];
    read_row(true, block, kv_head, offset, full);
    std::copy_n(full, v_dim, row);
    return;
  }
  const int dim = key ? k_dim : v_dim;
  if (!kv_type_quantized(t)) {
    const RowPlace place = row_place([&](int i) { return key ? k_element(block, kv_head, offset, i) : v_element(block, kv_head, offset, i); });
    const void* base = key ? k : v;
    switch (t) {
      case KvType::F32: return load_row<float>(base, place, row, dim, [](float x) { return x; });
      case KvType::F16: return load_row<uint16_t>(base, place, row, dim, fp16_to_fp32);
      case KvType::BF16: return load_row<uint16_t>(base, place, row, dim, bf16_to_fp32);
      default: return;
    }
  }
  const uint8_t* base =
      static_cast<const uint8_t*>(key ? k : v) + (key ? k_page_offset(block, kv_head) : v_page_offset(block, kv_head));
  read_quantized(t, base, dim, key && k_transposed, block_size, offset, row);
  if (kv_type_rotated(t)) kv_unrotate(row, dim, rotation_seed);
  if (const float* center = key ? key_center(kv_head) : nullptr)
    for (int i = 0; i < dim; ++i) row[i] += center[i];
}

void KvLayerView::write_k(int32_t block, int kv_head, int offset, const float* row) const { write_row(true, block, kv_head, offset, row); }
void KvLayerView::write_v(int32_t block, int kv_head, int offset, const float* row) const { write_row(false, block, kv_head, offset, row); }
void KvLayerView::read_k(int32_t block, int kv_head, int offset, float* row) const { read_row(true, block, kv_head, offset, row); }
void KvLayerView::read_v(int32_t block, int kv_head, int offset, float* row) const { read_row(false, block, kv_head, offset, row); }

float KvLayerView::k_at(int32_t block, int kv_head, int offset, int dim) const {
  if (!kv_type_quantized(types.k)) return load_element(types.k, k, k_element(block, kv_head, offset, dim));
  float row[kKvMaxRow];
  read_k(block, kv_head, offset, row);
  return row[dim];
}

float KvLayerView::v_at(int32_t block, int kv_head, int offset, int dim) const {
  if (!kv_type_quantized(v_type()))
    return v_in_k() ? load_element(types.k, k, k_element(block, kv_head, offset, dim))
                    : load_element(types.v, v, v_element(block, kv_head, offset, dim));
  float row[kKvMaxRow];
  read_v(block, kv_head, offset, row);
  return row[dim];
}

}  // namespace kestrel
