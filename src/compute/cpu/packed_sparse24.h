// The 2:4 sparse packed layouts (compute/cpu/packed_matrix.h) built from the file's 2:4 blocks
// (quant/sparse24.h), decoded row by row for the references, and expanded back into the dense layouts the
// prefill GEMMs run: a few tokens (decode) multiply the sparse bytes directly, reading about half the
// dense bytes; many tokens expand each row group once into the dense layout and run the dense kernel, so
// prefill costs what dense prefill does.
//
// Pattern ids: which two of a group's 4 inputs a row keeps, 0..5 for positions 01 02 03 12 13 23. Per
// 4-input group k of a block, the 16 rows' ids sit in one 64-bit word, row r's in bits 4p..4p+3 with
// p = 8 (r % 2) + r / 2: broadcast to every 64-bit lane and shifted right by 4 (r / 2) per 32-bit lane r,
// each lane holds its row's id in its low bits (what a 32-bit table permute reads).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "compute/cpu/packed_matrix.h"

namespace kestrel {

// Positions kept by pattern id c: kSparse24Pairs[c][0] < kSparse24Pairs[c][1].
inline constexpr uint8_t kSparse24Pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};

// Byte-shuffle controls by pattern id (16 entries, the last 10 unused): the 4 bytes of a row's dense group
// taken from its 2 kept bytes: byte j = 0 for the first kept position, 1 for the second, 0x80 (zero) for the
// others. A kernel adds the row's offset in its 16-byte lane to every byte (0x80 + offset stays negative).
inline constexpr std::array<uint32_t, 16> kSparse24ShuffleControl = [] {
  std::array<uint32_t, 16> table{};
  for (int c = 0; c < 16; ++c) {
    uint32_t v = 0;
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = c < 6 && kSparse24Pairs[c][0] == j ? 0 : c < 6 && kSparse24Pairs[c][1] == j ? 1 : 0x80;
      v |= byte << (8 * j);
    }
    table[static_cast<size_t>(c)] = v;
  }
  return table;
}();
// Per 32-bit lane r (a row) of a 512-bit vector: the right shift that brings its pattern id to the low bits
// of a broadcast 64-bit word (4 (r / 2)), and its kept bytes' offset in its 16-byte lane for groups 2v
// (kSparse24LaneOffset[0]) and 2v + 1 ([1]) in every byte. An 8-row half h of AVX2 uses entries 8h.. of the
// shifts (4 (4h + r / 2)) and entries 0..7 of the offsets.
inline constexpr std::array<uint32_t, 16> kSparse24IdShift = [] {
  std::array<uint32_t, 16> s{};
  for (uint32_t r = 0; r < 16; ++r) s[r] = 4 * (r / 2);
  return s;
}();
inline constexpr std::array<std::array<uint32_t, 16>, 2> kSparse24LaneOffset = [] {
  std::array<std::array<uint32_t, 16>, 2> o{};
  for (uint32_t e = 0; e < 2; ++e)
    for (uint32_t r = 0; r < 16; ++r) o[e][r] = (2 * (r % 4) + 8 * e) * 0x01010101u;
  return o;
}();
// Where a 2:4 block's pattern ids start.
constexpr size_t sparse24_ids_offset(PackedLayout l) {
  return l == PackedLayout::S24_Q8x16 ? 32 + 512 : l == PackedLayout::S24_Q4x16 ? 32 + 256 : 1024;
}

bool is_sparse24_layout(PackedLayout l);
// The dense layout a 2:4 layout expands into for prefill (Q8_0x16, Q4_0x16, F16Fma16).
PackedLayout sparse24_dense_layout(PackedLayout l);
// Bytes of a dense-layout group of n_in inputs (what expand_sparse24_group writes).
size_t sparse24_dense_group_bytes(PackedLayout l, int64_t n_in);

// The packed block of 16 rows from their file blocks: rows[i] is row i's 2:4 block (72, 42 or 26 bytes).
void pack_sparse24_block(PackedLayout l, const uint8_t* const* rows, uint8_t* out);
// Row i's 64 weights of one packed block.
void unpack_sparse24_block_row(PackedLayout l, const uint8_t* block, int row, float* out);
// Group g of a 2:4 packed matrix (layout l) in its dense layout: out [n_blocks * 2 dense blocks]
// (sparse24_dense_group_bytes), the pruned weights zero.
void expand_sparse24_group(PackedLayout l, const PackedView& w, int64_t g, uint8_t* out);
// The calling thread's buffer for one expanded group, at least `bytes` long (64-byte aligned; grown as
// needed, kept for the thread's later calls).
uint8_t* sparse24_group_buffer(size_t bytes);

}  // namespace kestrel
