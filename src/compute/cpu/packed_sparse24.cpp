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

// Where row i's positions nibble of group k (0..15) lies in a block (packed_sparse24.h): byte and shift.
struct NibblePlace {
  size_t byte;
  int shift;
};
NibblePlace nibble_place(PackedLayout l, int k, int i) {
  if (l == PackedLayout::S24_F16x16) return {sparse24_meta_offset(l) + 64 * (k / 8) + 4 * i + (k % 8) / 2, 4 * (k % 2)};
  return {sparse24_meta_offset(l) + sparse24_nibble_byte(k, i), sparse24_nibble_shift(k)};
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
    for (int k = 0; k < 16; ++k) {  // groups: the file's nibble (pair k / 2's byte, group k's half)
      const uint8_t nibble = (src[idx_at + k / 2] >> (4 * (k % 2))) & 0xF;
      const NibblePlace at = nibble_place(l, k, i);
      out[at.byte] |= static_cast<uint8_t>(nibble << at.shift);
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
    const NibblePlace at = nibble_place(l, k, i);
    const int nibble = (blk[at.byte] >> at.shift) & 0xF;
    for (int s = 0; s < 2; ++s) {
      const int code = kept_code(l, blk, k, i, s);
      const float w = l == PackedLayout::S24_F16x16 ? fp16_to_fp32(static_cast<uint16_t>(code))
                      : sparse24_q8_values(l)        ? fp16_to_fp32(halves[i]) * static_cast<float>(code)
                                                     : fp16_to_fp32(halves[i]) * static_cast<float>(code - 8);
      out[4 * k + ((nibble >> (2 * s)) & 3)] = w;
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
