// The 2:4 sparse packed layouts (compute/cpu/packed_matrix.h) built from the file's 2:4 blocks
// (quant/sparse24.h) and decoded row by row for the references. A few tokens (decode) multiply the sparse
// bytes directly, reading about half the dense bytes. Many tokens: the integer layouts prepare each row
// group once per call (kept codes next to their activation shuffle controls, the "wide" layout below) and
// the wide tiles then only load, shuffle and multiply, half the dense kernel's multiplies (prefill faster
// than dense); the F16 layout expands groups into the dense F16Fma16 layout and runs the dense kernel.
//
// Positions: each row keeps 2 of every 4-input group's inputs; the file gives their positions (0..3,
// ascending) in 2 bits each, a group's two in a nibble (the first at bits 0-1, the second at 2-3). A block's
// 128 metadata bytes hold these nibbles, arranged per layout:
// - Integer layouts (S24_Q8x16, S24_Q4x16), arranged for the byte shuffles that turn them into activation
//   shuffle controls: row r's dword u (u = 0, 1) at 64 u + 4 r; its byte j (0..3) holds group 4 u + j's
//   nibble in bits 0-3 and group 8 + 4 u + j's in bits 4-7. Pair p (0..3) of groups of 32-input activation
//   block a (groups 8 a + 2 p and 8 a + 2 p + 1) is then in dword p / 2, bytes 2 (p % 2) and 2 (p % 2) + 1,
//   nibble a, for all 16 rows (AVX-512) or 8 (AVX2, rows 8 h.. at 64 u + 32 h) in one load. Row r's control
//   of the pair (bytes m = 0, 1: group 2v's kept values; 2, 3: group 2v + 1's, as the codes lie) indexes the
//   pair's 8 activations broadcast to every 64 bits: byte m is the kept value's position plus
//   kSparse24ControlOffsets' byte m (0, 8, 4, 12: the second copy serves the second kept value, so each
//   byte of the control comes from its own byte of a spread dword without shifting it; see the kernels).
// - S24_F16x16: row r's dword h (the 32-input half h: groups 8 h..8 h + 7, group 8 h + i at bits 4 i) at
//   64 h + 4 r; the float permutes read a position from the low 2 bits of a 32-bit lane.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "compute/cpu/packed_matrix.h"

namespace kestrel {

// What the control of a pair of groups adds to its 4 positions, byte by byte (see above).
constexpr uint32_t kSparse24ControlOffsets = 0x0C040800;

// Without a bit-field byte move (AVX-512 VBMI), a control is made by byte shuffles and shifts: the rows'
// dwords of the pair (shifted right by 4 in 16-bit lanes for activation block 1) go through the in-lane
// shuffle kSparse24Spread[p % 2] (dword i of a 128-bit lane, row 4 l + i, takes its byte 2 (p % 2), group
// 2v's nibble, into byte 0 and byte 2 (p % 2) + 1, group 2v + 1's, into byte 2, zeros into bytes 1 and 3);
// s | s << 6 in 16-bit lanes then brings each nibble's bits 2-3 to the next byte's bits 0-1, and
// (that & 3) | kSparse24ControlOffsets is the control.
inline constexpr std::array<std::array<uint32_t, 4>, 2> kSparse24Spread = [] {
  std::array<std::array<uint32_t, 4>, 2> t{};
  for (uint32_t q = 0; q < 2; ++q)
    for (uint32_t i = 0; i < 4; ++i) t[q][i] = (4 * i + 2 * q) | 0x80u << 8 | (4 * i + 2 * q + 1) << 16 | 0x80u << 24;
  return t;
}();

// Where row `row`'s nibble of group k (0..15) lies in a 2:4 integer layout's metadata: the byte, and the
// shift of the nibble in it.
constexpr size_t sparse24_nibble_byte(int k, int row) { return 64 * static_cast<size_t>((k % 8) / 4) + 4 * static_cast<size_t>(row) + k % 4; }
constexpr int sparse24_nibble_shift(int k) { return 4 * (k / 8); }

// Whether a 2:4 integer layout's kept values are Q8 codes (else Q4 ones).
constexpr bool sparse24_q8_values(PackedLayout l) { return l == PackedLayout::S24_Q8x16; }

// Where a 2:4 block's metadata (positions) start: 128 bytes, the block's end.
constexpr size_t sparse24_meta_offset(PackedLayout l) {
  return sparse24_q8_values(l) ? 32 + 512 : l == PackedLayout::S24_Q4x16 ? 32 + 256 : 1024;
}

// Up to this many tokens the 2:4 F16 kernels multiply the sparse values; beyond, groups are expanded into
// F16Fma16 and the dense float GEMM runs. (The integer layouts' threshold is each ISA's: Tiles::kSparseDirectTokens.)
constexpr int kSparse24F16DirectTokens = 4;
// From this many tokens the AVX2 2:4 F16 kernel puts tokens in the vector lanes (a tile of this many) and
// transposes the activations on each call; matmul.cpp gives such calls large takes of groups.
constexpr int kSparse24F16LaneTokens = 48;

// Bytes of a group of n_in inputs expanded into F16Fma16.
constexpr size_t sparse24_f16_dense_group_bytes(int64_t n_in) { return static_cast<size_t>(n_in) * 16 * 2; }

// The wide layout of an integer 2:4 group (S24_Q8x16, S24_Q4x16), written per call by the ISA's
// prepare_wide for many tokens. Per 64-input block, kSparse24WideBlockBytes:
//   [16] float      row scales, at 0
//   [2][16] int32   128 x each row's sum of kept codes per 32-input activation block, at kSparse24WideOffsets
//   [8 pairs of groups] { [16 rows][4] int8 signed kept codes, [16 rows][4] byte-shuffle control that puts
//                         each row's 4 kept inputs' activations (of the pair's 8) next to them }, from
//                         kSparse24WidePairs, kSparse24WidePairBytes each
// AVX2 reads the first or second 32 bytes of each 64 (rows 0-7, 8-15).
constexpr size_t kSparse24WideOffsets = 64;
constexpr size_t kSparse24WidePairs = 192;
constexpr size_t kSparse24WidePairBytes = 128;
constexpr size_t kSparse24WideBlockBytes = kSparse24WidePairs + 8 * kSparse24WidePairBytes;

// The packed block of 16 rows from their file blocks: rows[i] is row i's 2:4 block (72, 42 or 26 bytes).
void pack_sparse24_block(PackedLayout l, const uint8_t* const* rows, uint8_t* out);
// Row i's 64 weights of one packed block.
void unpack_sparse24_block_row(PackedLayout l, const uint8_t* block, int row, float* out);
// The calling thread's buffer for prepared or expanded groups, at least `bytes` long (64-byte aligned; grown as
// needed, kept for the thread's later calls).
uint8_t* sparse24_group_buffer(size_t bytes);

}  // namespace kestrel
