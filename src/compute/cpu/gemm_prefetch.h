// Software prefetch for the packed GEMM kernels, shared by every ISA's file (prefetch_line: prefetcht0 on
// x86, prfm pldl1keep on AArch64). Internal linkage.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cpu/prefetch.h"

// Fully unrolls the loop that follows (the token loops of the register tiles): with the loop left rolled,
// GCC keeps the accumulator arrays in memory and the tiles run at the store port's pace (measured: the
// AVX-512 Q4_0 prefill lost 8-10% when a refactor changed its inlining).
#define KESTREL_UNROLL _Pragma("GCC unroll 16")

namespace kestrel {
namespace {

// The block `ahead` blocks past block b of a group whose last block is nb - 1; past the group it is in
// `after` (the bytes streamed next, possibly another matrix's), or null when nothing follows.
inline const uint8_t* block_ahead(const uint8_t* blk, size_t b, size_t ahead, size_t nb, size_t block_bytes,
                                  const uint8_t* after) {
  if (b + ahead < nb) return blk + ahead * block_bytes;
  return after ? after + (b + ahead - nb) * block_bytes : nullptr;
}

// Every line of one block (null: nothing).
inline void prefetch_block(const uint8_t* block, size_t block_bytes) {
  if (!block) return;
  for (size_t off = 0; off < block_bytes; off += 64) prefetch_line(block + off);
}

// Part `part` of `n_parts` of a block's lines (null: nothing). Super-blocks are large (2304 / 3360 bytes for
// 16 rows): even one token has too few of them in the out-of-order window, so they are prefetched a few
// ahead, a part per 32-input step (a burst of 40-odd prefetches at once would stall on the core's miss buffers).
inline void prefetch_block_part(const uint8_t* block, size_t block_bytes, int part, int n_parts) {
  if (!block) return;
  const size_t lines = (block_bytes + 63) / 64, begin = lines * part / n_parts, end = lines * (part + 1) / n_parts;
  for (size_t line = begin; line < end; ++line) prefetch_line(block + 64 * line);
}
inline void prefetch_superblock_part(const uint8_t* block, size_t block_bytes, int part) {
  prefetch_block_part(block, block_bytes, part, 8);
}

// Two-pass tiles (AVX2 does a 16-row group as two 8-row halves, the second reading the group again from
// cache) would read memory only during the first pass, and leave it idle during the second (measured: one
// token's Q4_0 GEMM streamed 16 GB/s from memory against 36 from cache). Instead step s = pass * nb + b of
// a group prefetches half of block s / 2 + nb / 2 + ahead of the stream (the group's nb blocks, then
// `after`'s): memory is read at one pace through both passes, each block at least 2 * ahead steps early.
struct StreamHalf {
  const uint8_t* block;  // null: nothing to prefetch
  int half;              // which half of its lines
};
inline StreamHalf two_pass_ahead(const uint8_t* group, int pass, size_t b, size_t ahead, size_t nb, size_t block_bytes,
                                 const uint8_t* after) {
  const size_t step = static_cast<size_t>(pass) * nb + b;
  return {block_ahead(group, 0, step / 2 + nb / 2 + ahead, nb, block_bytes, after), static_cast<int>(step % 2)};
}

}  // namespace
}  // namespace kestrel
