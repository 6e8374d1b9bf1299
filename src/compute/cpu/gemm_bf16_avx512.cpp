// BF16 GEMM on 16-row packed weights (F16 and BF16 models) with AVX-512 BF16: lanes are the 16 rows, and
// one vdpbf16ps multiplies them by 2 inputs of one token and accumulates in fp32. Compiled with AVX-512
// flags and entered only when the CPU has AVX512_BF16; internal linkage throughout.
#include <immintrin.h>

#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr int kTokens = 8;
constexpr int64_t kGroupChunk = 4;
constexpr size_t kPrefetchBlocks = 4;

template <int T>
void tile(PackedView w, const uint16_t* xb, size_t n_in, float* y, size_t ys, int64_t g, const uint8_t* after) {
  const size_t nb = static_cast<size_t>(w.n_blocks);
  __m512 acc[T][2];  // two chains per token for instruction-level parallelism
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.data + (static_cast<size_t>(g) * nb + b) * w.block_bytes;
    // Prefetch ahead, on into `after` (the bytes streamed next) past the group's last block: one line per
    // line consumed (the block's 16 lines requested at once stall on the miss buffers).
    const uint8_t* ahead = block_ahead(blk, b, kPrefetchBlocks, nb, w.block_bytes, after);
    for (int p = 0; p < 16; ++p) {
      if (ahead) prefetch_line(ahead + 64 * p);
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(blk + 64 * p);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const auto* pair = reinterpret_cast<const int32_t*>(xb + static_cast<size_t>(t) * n_in + 32 * b + 2 * p);
        acc[t][p & 1] = _mm512_dpbf16_ps(acc[t][p & 1], wv, (__m512bh)_mm512_set1_epi32(*pair));
      }
    }
  }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<size_t>(t) * ys + static_cast<size_t>(g) * 16;
    const __m512 rows = _mm512_add_ps(acc[t][0], acc[t][1]);
    _mm512_storeu_ps(yt, w.accumulate ? _mm512_add_ps(_mm512_loadu_ps(yt), rows) : rows);
  }
}

void gemm(PackedView w, const uint16_t* xb, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  const size_t nb = static_cast<size_t>(w.n_blocks), n_in = nb * 32;
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kGroupChunk) {
    const int64_t g1 = group_end < g0 + kGroupChunk ? group_end : g0 + kGroupChunk;
    for (int t0 = 0; t0 < n_tok; t0 += kTokens) {
      const uint16_t* x = xb + static_cast<size_t>(t0) * n_in;
      float* yt = y + static_cast<size_t>(t0) * ys;
      for (int64_t g = g0; g < g1; ++g) {
        const uint8_t* after = g + 1 < group_end ? w.data + static_cast<size_t>(g + 1) * nb * w.block_bytes : w.next;
        switch (n_tok - t0 < kTokens ? n_tok - t0 : kTokens) {
          case 1: tile<1>(w, x, n_in, yt, ys, g, after); break;
          case 2: tile<2>(w, x, n_in, yt, ys, g, after); break;
          case 3: tile<3>(w, x, n_in, yt, ys, g, after); break;
          case 4: tile<4>(w, x, n_in, yt, ys, g, after); break;
          case 5: tile<5>(w, x, n_in, yt, ys, g, after); break;
          case 6: tile<6>(w, x, n_in, yt, ys, g, after); break;
          case 7: tile<7>(w, x, n_in, yt, ys, g, after); break;
          default: tile<8>(w, x, n_in, yt, ys, g, after); break;
        }
      }
    }
  }
}

}  // namespace

PackedGemmBf16Fn packed_gemm_bf16_kernel_avx512() { return gemm; }

}  // namespace kestrel
