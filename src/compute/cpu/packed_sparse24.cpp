#include "compute/cpu/packed_sparse24.h"

#include <cstring>
#include <memory>

#include "core/fp16.h"
#include "core/large_buffer.h"
#include "quant/blocks.h"
#include "quant/sparse24.h"

namespace kestrel {
namespace {

constexpr int kRows = PackedMatrix::kRows;

// Where row i's metadata byte of pair v (of groups 2v, 2v + 1) sits in a block's 128 (masks or positions).
size_t meta_byte(PackedLayout l, int v, int i) {
  return sparse24_meta_offset(l) + (sparse24_has_positions(l) ? 64 * (v / 4) + 4 * i + v % 4 : 16 * v + i);
}

// Row i's keep mask of group k (0..15) of a packed block.
uint32_t row_mask(PackedLayout l, const uint8_t* blk, int k, int i) {
  const uint8_t byte = blk[meta_byte(l, k / 2, i)];
  const uint32_t half = k % 2 ? byte >> 4 : byte & 0xF;
  return sparse24_has_positions(l) ? 1u << (half & 3) | 1u << (half >> 2) : half;
}

// Kept value s of row i in group k, as its code (Q8: q; Q4: q in 0..15) or fp16 bits (F16).
int kept_code(PackedLayout l, const uint8_t* blk, int k, int i, int s) {
  const int at = 4 * i + 2 * (k % 2) + s;  // byte in its pair's 64 (Q8 and Q4)
  if (sparse24_q8_values(l)) return static_cast<int8_t>(blk[32 + 64 * (k / 2) + at]);
  if (l == PackedLayout::S24_F16x16) {
    uint16_t h;
    std::memcpy(&h, blk + 2 * (32 * k + 16 * s + i), 2);
    return h;
  }
  const int pair = k / 2;  // Q4
  const uint8_t byte = blk[32 + 64 * (pair % 4) + at];
  return pair < 4 ? byte & 0xF : byte >> 4;
}

}  // namespace

void pack_sparse24_block(PackedLayout l, const uint8_t* const* rows, uint8_t* out) {
  const bool q8 = sparse24_q8_values(l), f16 = l == PackedLayout::S24_F16x16;
  const DType type = q8 ? DType::S24_Q8 : f16 ? DType::S24_F16 : DType::S24_Q4;
  const size_t idx_at = dtype_traits(type).block_bytes - 8;  // the file block's position bytes
  auto* halves = reinterpret_cast<uint16_t*>(out);
  std::memset(out, 0, sparse24_meta_offset(l) + 128);
  for (int i = 0; i < kRows; ++i) {
    const uint8_t* src = rows[i];
    for (int v = 0; v < 8; ++v) {  // pairs of groups
      uint8_t meta = src[idx_at + v];  // positions: the file's byte as it is
      if (!sparse24_has_positions(l)) {
        meta = 0;
        for (int k = 2 * v; k < 2 * v + 2; ++k) {
          const unsigned mask = 1u << sparse24_position(src + idx_at, 2 * k) | 1u << sparse24_position(src + idx_at, 2 * k + 1);
          meta |= static_cast<uint8_t>(k % 2 ? mask << 4 : mask);
        }
      }
      out[meta_byte(l, v, i)] = meta;
    }
    for (int j = 0; j < kS24Kept; ++j) {  // kept value j: group j / 2, value j % 2
      const int k = j / 2, at = 4 * i + 2 * (k % 2) + j % 2;
      if (f16) {
        halves[32 * k + 16 * (j % 2) + i] = reinterpret_cast<const uint16_t*>(src)[j];
      } else if (q8) {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
        halves[i] = b->d;
        out[32 + 64 * (k / 2) + at] = static_cast<uint8_t>(b->qs[j]);
      } else {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
        halves[i] = b->d;
        const int q = (j < 16 ? b->qs[j] : b->qs[j - 16] >> 4) & 0xF, pair = k / 2;
        out[32 + 64 * (pair % 4) + at] |= static_cast<uint8_t>(pair < 4 ? q : q << 4);
      }
    }
  }
}

void unpack_sparse24_block_row(PackedLayout l, const uint8_t* blk, int i, float* out) {
  const auto* halves = reinterpret_cast<const uint16_t*>(blk);
  for (int e = 0; e < kS24Block; ++e) out[e] = 0.0f;
  for (int k = 0; k < 16; ++k) {
    const uint32_t mask = row_mask(l, blk, k, i);
    for (int s = 0; s < 2; ++s) {
      const int code = kept_code(l, blk, k, i, s);
      const float w = l == PackedLayout::S24_F16x16 ? fp16_to_fp32(static_cast<uint16_t>(code))
                      : sparse24_q8_values(l)        ? fp16_to_fp32(halves[i]) * static_cast<float>(code)
                                                     : fp16_to_fp32(halves[i]) * static_cast<float>(code - 8);
      out[4 * k + mask_position(mask, s)] = w;
    }
  }
}

uint8_t* sparse24_group_buffer(size_t bytes) {
  thread_local std::shared_ptr<uint8_t[]> buffer;
  thread_local size_t size = 0;
  if (size < bytes) buffer = allocate_large_buffer(bytes), size = bytes;
  return buffer.get();
}

}  // namespace kestrel
