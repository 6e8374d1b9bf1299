// The loop every packed integer GEMM kernel shares: row groups in chunks whose weights stay in cache while
// the token tiles pass, and per group the bytes the thread streams next (for the kernels' prefetch).
// Included by the ISA files; plain C++ with internal linkage.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/packed_matrix.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

// Calls f.template operator()<T>() with T = min(n, kMax), n >= 1: kernels are instantiated per tile size.
template <int kMax, typename F>
inline void with_tile_tokens(int n, F&& f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return with_tile_tokens<kMax - 1>(n, f);
  }
  f.template operator()<kMax>();
}

// y[t, rows of groups [group_begin, group_end)] for t < n_tok, in tiles of up to kTokens tokens:
// tile.template operator()<T>(x, y_tile, g, after) computes group g for the T tokens whose activation blocks
// start at x (kActPerBlock 32-input blocks per weight block) and outputs at y_tile; `after` is what the
// thread streams once group g is done (the next group, or the caller's PackedView::next).
template <int kTokens, int64_t kGroupChunk, size_t kActPerBlock, typename Tile>
inline void drive_packed_gemm(const PackedView& w, const BlockQ8A* xq, int n_tok, float* y, size_t ys, int64_t group_begin,
                              int64_t group_end, const Tile& tile) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kGroupChunk) {
    const int64_t g1 = group_end < g0 + kGroupChunk ? group_end : g0 + kGroupChunk;
    for (int t0 = 0; t0 < n_tok; t0 += kTokens) {
      const BlockQ8A* x = xq + static_cast<size_t>(t0) * nb * kActPerBlock;
      float* yt = y + static_cast<size_t>(t0) * ys;
      for (int64_t g = g0; g < g1; ++g) {
        const uint8_t* after = g + 1 < group_end ? w.data + static_cast<size_t>(g + 1) * nb * w.block_bytes : w.next;
        with_tile_tokens<kTokens>(n_tok - t0, [&]<int T>() { tile.template operator()<T>(x, yt, g, after); });
      }
    }
  }
}

// Weight blocks of the K-quant layouts hold 256 inputs: 8 activation blocks each.
constexpr size_t activation_blocks_per_block(PackedLayout l) { return static_cast<size_t>(packed_block_inputs(l) / 32); }

// An ISA's packed GEMM of layout L from its tile kernels: Tiles::kTokens, Tiles::kGroupChunk, and
// Tiles::template tile<L, T>(w, x, nb, y, ys, g, after) for group g and T tokens (see drive_packed_gemm).
template <class Tiles, PackedLayout L>
void packed_gemm(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t ys, int64_t group_begin,
                 int64_t group_end) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  drive_packed_gemm<Tiles::kTokens, Tiles::kGroupChunk, activation_blocks_per_block(L)>(
      w, xq, n_tok, y, ys, group_begin, group_end, [&]<int T>(const BlockQ8A* x, float* yt, int64_t g, const uint8_t* after) {
        Tiles::template tile<L, T>(w, x, nb, yt, ys, g, after);
      });
}

// A 2:4 layout's GEMM: Tiles::template tile<L, T> for up to Tiles::kSparseDirectTokens tokens; beyond,
// Tiles::kGroupChunk groups at a time prepared into the wide layout (Tiles::template prepare_wide<L>(w, g,
// after, out), packed_sparse24.h) in a thread's buffer, then Tiles::template tile_wide<L, T> over them with
// up to Tiles::kWideTokens tokens per tile.
template <class Tiles, PackedLayout L>
void sparse24_gemm(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= Tiles::kSparseDirectTokens) return packed_gemm<Tiles, L>(w, xq, n_tok, y, ys, group_begin, group_end);
  const size_t nb = static_cast<size_t>(w.n_blocks);
  uint8_t* prepared = sparse24_group_buffer(static_cast<size_t>(Tiles::kGroupChunk) * nb * kSparse24WideBlockBytes);  // [chunk][nb] wide blocks
  const PackedView wide{prepared, w.n_blocks, kSparse24WideBlockBytes, nullptr, w.accumulate};
  for (int64_t g0 = group_begin; g0 < group_end; g0 += Tiles::kGroupChunk) {
    const int64_t n = group_end - g0 < Tiles::kGroupChunk ? group_end - g0 : Tiles::kGroupChunk;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* after = g0 + i + 1 < group_end ? w.data + static_cast<size_t>(g0 + i + 1) * nb * w.block_bytes : w.next;
      Tiles::template prepare_wide<L>(w, g0 + i, after, prepared + static_cast<size_t>(i) * nb * kSparse24WideBlockBytes);
    }
    drive_packed_gemm<Tiles::kWideTokens, Tiles::kGroupChunk, 2>(
        wide, xq, n_tok, y + static_cast<size_t>(g0) * PackedMatrix::kRows, ys, 0, n,
        [&]<int T>(const BlockQ8A* x, float* yt, int64_t g, const uint8_t*) { Tiles::template tile_wide<L, T>(wide, x, nb, yt, ys, g); });
  }
}

// A 2:4 integer layout's GEMM: through the wide layout for many tokens where the ISA has it
// (Tiles::kSparse24Wide, sparse24_gemm), else the direct tiles at every token count.
template <class Tiles, PackedLayout L>
constexpr PackedGemmFn sparse24_gemm_of() {
  if constexpr (Tiles::kSparse24Wide) return sparse24_gemm<Tiles, L>;
  else return packed_gemm<Tiles, L>;
}

// The integer layouts' GEMMs of one ISA (nullptr for the float layouts, which have their own kernels).
template <class Tiles>
PackedGemmFn packed_gemm_table(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::Q4_0x16: return packed_gemm<Tiles, PackedLayout::Q4_0x16>;
    case PackedLayout::Q8_0x16: return packed_gemm<Tiles, PackedLayout::Q8_0x16>;
    case PackedLayout::Q4_1x16: return packed_gemm<Tiles, PackedLayout::Q4_1x16>;
    case PackedLayout::Q5_0x16: return packed_gemm<Tiles, PackedLayout::Q5_0x16>;
    case PackedLayout::Q5_1x16: return packed_gemm<Tiles, PackedLayout::Q5_1x16>;
    case PackedLayout::Q2_Kx16: return packed_gemm<Tiles, PackedLayout::Q2_Kx16>;
    case PackedLayout::Q3_Kx16: return packed_gemm<Tiles, PackedLayout::Q3_Kx16>;
    case PackedLayout::Q4_Kx16: return packed_gemm<Tiles, PackedLayout::Q4_Kx16>;
    case PackedLayout::Q5_Kx16: return packed_gemm<Tiles, PackedLayout::Q5_Kx16>;
    case PackedLayout::Q6_Kx16: return packed_gemm<Tiles, PackedLayout::Q6_Kx16>;
    case PackedLayout::S24_Q8x16: return sparse24_gemm_of<Tiles, PackedLayout::S24_Q8x16>();
    case PackedLayout::S24_Q4x16: return sparse24_gemm_of<Tiles, PackedLayout::S24_Q4x16>();
    default: return nullptr;
  }
}

}  // namespace
}  // namespace kestrel
