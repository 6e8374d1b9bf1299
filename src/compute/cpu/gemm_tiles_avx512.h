// What the AVX-512 integer GEMM files share (gemm_avx512.cpp, the 2:4 tiles of gemm_sparse_int_avx512_impl.h):
// the register tile's shape, how far ahead weights are prefetched, and the row results' store. Include only
// from files compiled for AVX-512; internal linkage.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr size_t kPrefetchBlocks = 6;  // how far ahead weights are prefetched (several tokens)
// ... and the 32-input layouts' small blocks at any token count: at 6 a verify forward of a few tokens
// (speculative decoding, 2-8 rows) waited on memory its compute could hide (TinyLlama Q4_0, 2 threads:
// pp4 / pp5 / pp8 +10-25% at 16, pp512 unchanged).
constexpr size_t kPrefetchBlocks32 = 16;
constexpr size_t kPrefetchSparseDecode = 20;  // ... the 2:4 layouts' blocks (672 or 416 bytes), one token

// The token and row-group tiling of every AVX-512 layout (gemm_driver.h).
struct Avx512TileShape {
  static constexpr int kTokens = 8;          // tokens per register tile
  static constexpr int64_t kGroupChunk = 4;  // row groups whose weights stay in cache while token tiles pass
};

// Puts one token's 16 row results at y: written, or added to what is there (PackedView::accumulate).
inline void store_rows(const PackedView& w, float* y, __m512 rows) {
  _mm512_storeu_ps(y, w.accumulate ? _mm512_add_ps(_mm512_loadu_ps(y), rows) : rows);
}

}  // namespace
}  // namespace kestrel
