// The 2:4 sparse packed layouts (compute/cpu/packed_matrix.h) built from the file's 2:4 blocks
// (quant/sparse24.h) and decoded row by row for the references. A few tokens (decode) multiply the sparse
// bytes directly, reading about half the dense bytes. Many tokens: the integer layouts prepare each row
// group once per call (kept codes next to their activation shuffle controls, the "wide" layout below) and
// the wide tiles then only load, shuffle and multiply, half the dense kernel's multiplies (prefill faster
// than dense); the F16 layout expands groups into the dense F16Fma16 layout and runs the dense kernel.
//
// Keep masks: bit j of row r's 4-bit mask for a 4-input group says whether input j is kept (two bits set).
// Per pair v of groups (2v, 2v + 1) of a block, 16 bytes: byte r = row r's mask of group 2v in the low
// nibble, of group 2v + 1 in the high one. Widened to 32-bit lanes (lane = row), a mask indexes the tables
// below with a 16-entry permute (AVX-512), or with its low 3 bits in an 8-entry one (AVX2): the six masks
// 3 5 6 9 10 12 leave 3 5 6 1 2 4, all distinct, so entries 1, 2 and 4 repeat those of 9, 10 and 12.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "compute/cpu/packed_matrix.h"

namespace kestrel {

// Position (0..3) of kept value s (0: the lower) of mask m (two bits set); -1 for any other m.
constexpr int mask_position(uint32_t m, int s) {
  if (m > 15 || __builtin_popcount(m) != 2) return -1;
  const int low = __builtin_ctz(m);
  return s == 0 ? low : __builtin_ctz(m & ~(1u << low));
}

// A table over masks (16 lanes of 32 bits), entry(m) for the six two-bit masks, repeated at m & 7.
template <typename Entry>
constexpr std::array<uint32_t, 16> sparse24_mask_table(Entry entry) {
  std::array<uint32_t, 16> t{};
  for (uint32_t m = 0; m < 16; ++m)
    if (mask_position(m, 0) >= 0) t[m] = t[m & 7] = entry(m);
  return t;
}

// Gathering activations (decode): row r's 4 kept values of a pair of groups meet the activations at
// inputs p0, p1 (group 2v) and 4 + p0, 4 + p1 (group 2v + 1) of the pair's 8: the byte-shuffle control is
// first[mask of 2v] | second[mask of 2v + 1].
inline constexpr std::array<std::array<uint32_t, 16>, 2> kSparse24Gather = {
    sparse24_mask_table([](uint32_t m) { return uint32_t(mask_position(m, 0)) | uint32_t(mask_position(m, 1)) << 8; }),
    sparse24_mask_table([](uint32_t m) { return uint32_t(4 + mask_position(m, 0)) << 16 | uint32_t(4 + mask_position(m, 1)) << 24; }),
};

// Positions layouts (S24_Q8x16P, S24_Q4x16P, and S24_F16x16): the masks' 128 bytes hold the file's 2-bit
// positions instead, row r's index bytes 4a..4a+3 at 64 a + 4 r: byte p of that dword holds pair 4a + p's
// positions (group 2v's two at bits 0-3, group 2v + 1's at bits 4-7). On AVX-512 with VBMI one
// vpmultishiftqb and one vpternlogd make a pair's 16 byte-shuffle controls from them, where masks take a
// widening and two permutes (all three on the shuffle port, which the gathering shuffles need too); AVX2 has
// no such byte move, and the masks index its 8-entry permutes (see above), so the integer types keep masks
// layouts for AVX2 and AVX-512 without VBMI. The F16 tiles' float permutes read a position from the low 2
// bits of a 32-bit lane, so there a row's dword shifted right is the control, on every ISA.
constexpr bool sparse24_vbmi_layout(PackedLayout l) { return l == PackedLayout::S24_Q8x16P || l == PackedLayout::S24_Q4x16P; }
constexpr bool sparse24_has_positions(PackedLayout l) { return sparse24_vbmi_layout(l) || l == PackedLayout::S24_F16x16; }
constexpr PackedLayout sparse24_positions_twin(PackedLayout masks) {
  return masks == PackedLayout::S24_Q8x16 ? PackedLayout::S24_Q8x16P : PackedLayout::S24_Q4x16P;
}
// Whether a 2:4 integer layout's kept values are Q8 codes (else Q4 ones).
constexpr bool sparse24_q8_values(PackedLayout l) { return l == PackedLayout::S24_Q8x16 || l == PackedLayout::S24_Q8x16P; }

// Where a 2:4 block's masks (or positions) start: 128 bytes, the block's end.
constexpr size_t sparse24_meta_offset(PackedLayout l) {
  return sparse24_q8_values(l) ? 32 + 512 : l == PackedLayout::S24_Q4x16 || l == PackedLayout::S24_Q4x16P ? 32 + 256 : 1024;
}

// Up to this many tokens the 2:4 F16 kernels multiply the sparse values; beyond, groups are expanded into
// F16Fma16 and the dense float GEMM runs. (The integer layouts' threshold is each ISA's: Tiles::kSparseDirectTokens.)
constexpr int kSparse24F16DirectTokens = 4;

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
