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

int pattern_id(int p0, int p1) {
  for (int c = 0; c < 6; ++c)
    if (kSparse24Pairs[c][0] == p0 && kSparse24Pairs[c][1] == p1) return c;
  return 0;  // unreachable for a well-formed block (positions ascend)
}
// Row r's pattern id for group k, and its place in the group's 64-bit word.
int id_shift(int r) { return 4 * (8 * (r % 2) + r / 2); }
int row_pattern(const uint8_t* ids, int k, int r) {
  uint64_t word;
  std::memcpy(&word, ids + 8 * k, 8);
  return static_cast<int>((word >> id_shift(r)) & 0xF);
}
// Where kept value s of row r in group k sits in the kept vectors of the integer layouts: vector k / 2,
// lane r / 4, byte 8 (k % 2) + 2 (r % 4) + s of the lane.
size_t kept_index(int k, int r, int s) { return static_cast<size_t>(64 * (k / 2) + 16 * (r / 4) + 8 * (k % 2) + 2 * (r % 4) + s); }

size_t ids_offset(PackedLayout l) { return sparse24_ids_offset(l); }

// Row i's kept value s of group k, as its integer code (Q8: q; Q4: q in 0..15) or fp16 bits (F16).
int kept_code(PackedLayout l, const uint8_t* blk, int k, int i, int s) {
  switch (l) {
    case PackedLayout::S24_Q8x16: return static_cast<int8_t>(blk[32 + kept_index(k, i, s)]);
    case PackedLayout::S24_Q4x16: {
      const size_t at = kept_index(k, i, s);  // in kept vector at / 64: nibble of byte (v % 4, byte), low for v < 4
      const uint8_t byte = blk[32 + 64 * ((at / 64) % 4) + at % 64];
      return ((at / 64 < 4 ? byte : byte >> 4) & 0xF) ^ 8;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, blk + 2 * (32 * k + 16 * s + i), 2);
      return h;
    }
  }
}

}  // namespace

bool is_sparse24_layout(PackedLayout l) {
  return l == PackedLayout::S24_F16x16 || l == PackedLayout::S24_Q8x16 || l == PackedLayout::S24_Q4x16;
}

PackedLayout sparse24_dense_layout(PackedLayout l) {
  return l == PackedLayout::S24_Q8x16 ? PackedLayout::Q8_0x16 : l == PackedLayout::S24_Q4x16 ? PackedLayout::Q4_0x16 : PackedLayout::F16Fma16;
}

size_t sparse24_dense_group_bytes(PackedLayout l, int64_t n_in) {
  const size_t per_32 = l == PackedLayout::S24_Q8x16 ? 32 + 512 : l == PackedLayout::S24_Q4x16 ? 32 + 256 : 1024;
  return static_cast<size_t>(n_in / 32) * per_32;
}

void pack_sparse24_block(PackedLayout l, const uint8_t* const* rows, uint8_t* out) {
  const DType type = l == PackedLayout::S24_Q8x16 ? DType::S24_Q8 : l == PackedLayout::S24_Q4x16 ? DType::S24_Q4 : DType::S24_F16;
  const size_t idx_at = dtype_traits(type).block_bytes - 8;  // the file block's position bytes
  auto* halves = reinterpret_cast<uint16_t*>(out);
  uint64_t ids[16] = {};  // [group] the 16 rows' pattern ids
  for (int i = 0; i < kRows; ++i) {
    const uint8_t* src = rows[i];
    for (int k = 0; k < 16; ++k) {
      const int c = pattern_id(sparse24_position(src + idx_at, 2 * k), sparse24_position(src + idx_at, 2 * k + 1));
      ids[k] |= static_cast<uint64_t>(c) << id_shift(i);
    }
    switch (l) {
      case PackedLayout::S24_Q8x16: {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
        halves[i] = b->d;
        for (int j = 0; j < kS24Kept; ++j) out[32 + kept_index(j / 2, i, j % 2)] = static_cast<uint8_t>(b->qs[j]);
        break;
      }
      case PackedLayout::S24_Q4x16: {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
        halves[i] = b->d;
        for (int j = 0; j < kS24Kept; ++j) {
          const int q = (j < 16 ? b->qs[j] : b->qs[j - 16] >> 4) & 0xF;
          const size_t at = kept_index(j / 2, i, j % 2);
          uint8_t& byte = out[32 + 64 * ((at / 64) % 4) + at % 64];
          byte = static_cast<uint8_t>(at / 64 < 4 ? (byte & 0xF0) | (q ^ 8) : (byte & 0x0F) | ((q ^ 8) << 4));
        }
        break;
      }
      default: {
        const auto* v = reinterpret_cast<const uint16_t*>(src);
        for (int j = 0; j < kS24Kept; ++j) halves[32 * (j / 2) + 16 * (j % 2) + i] = v[j];
        break;
      }
    }
  }
  std::memcpy(out + ids_offset(l), ids, sizeof ids);
}

void unpack_sparse24_block_row(PackedLayout l, const uint8_t* blk, int i, float* out) {
  const auto* halves = reinterpret_cast<const uint16_t*>(blk);
  for (int e = 0; e < kS24Block; ++e) out[e] = 0.0f;
  for (int k = 0; k < 16; ++k) {
    const int c = row_pattern(blk + ids_offset(l), k, i);
    for (int s = 0; s < 2; ++s) {
      const int code = kept_code(l, blk, k, i, s);
      const float w = l == PackedLayout::S24_Q8x16   ? fp16_to_fp32(halves[i]) * static_cast<float>(code)
                      : l == PackedLayout::S24_Q4x16 ? fp16_to_fp32(halves[i]) * static_cast<float>(code - 8)
                                                     : fp16_to_fp32(static_cast<uint16_t>(code));
      out[4 * k + kSparse24Pairs[c][s]] = w;
    }
  }
}

void expand_sparse24_group(PackedLayout l, const PackedView& w, int64_t g, uint8_t* out) {
  const size_t dense_block = sparse24_dense_group_bytes(l, 32);
  std::memset(out, 0, static_cast<size_t>(w.n_blocks) * 2 * dense_block);
  for (int64_t b = 0; b < w.n_blocks; ++b) {
    const uint8_t* blk = w.data + static_cast<size_t>(g * w.n_blocks + b) * w.block_bytes;
    for (int half = 0; half < 2; ++half) {  // the two dense blocks of 32 inputs
      uint8_t* dst = out + static_cast<size_t>(2 * b + half) * dense_block;
      if (l != PackedLayout::S24_F16x16) {
        std::memcpy(dst, blk, 32);  // fp16 d[16], shared by both halves
        // untouched codes: Q8_0x16 stores q + 128, Q4_0x16 nibbles q + 8 (w = 0)
        if (l == PackedLayout::S24_Q8x16) std::memset(dst + 32, 128, 512);
        else std::memset(dst + 32, 0x88, 256);
      }
      for (int k = 8 * half; k < 8 * half + 8; ++k)
        for (int i = 0; i < kRows; ++i) {
          const int c = row_pattern(blk + ids_offset(l), k, i);
          for (int s = 0; s < 2; ++s) {
            const int code = kept_code(l, blk, k, i, s), kk = 4 * (k - 8 * half) + kSparse24Pairs[c][s];  // input in the dense block
            if (l == PackedLayout::S24_Q8x16) {
              dst[32 + (kk / 4) * 64 + i * 4 + kk % 4] = static_cast<uint8_t>(code + 128);
            } else if (l == PackedLayout::S24_Q4x16) {  // nibble tile: byte (kk % 16 / 4, row, kk % 4), high nibble for kk >= 16
              uint8_t& byte = dst[32 + ((kk % 16) / 4) * 64 + i * 4 + kk % 4];
              byte = static_cast<uint8_t>(kk < 16 ? (byte & 0xF0) | code : (byte & 0x0F) | (code << 4));
            } else {
              const auto h = static_cast<uint16_t>(code);
              std::memcpy(dst + 2 * (kk * kRows + i), &h, 2);
            }
          }
        }
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
