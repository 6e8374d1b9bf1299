// Float GEMM on 16-row packed F16 / BF16 / F32 weights (the F16Fma16 / BF16Fma16 / F32Fma16 layouts: per
// input, the 16 rows' weights side by side), the weights exact (no rounding), written once against a vector
// interface V (simd_*.h: W float lanes; load of floats, of fp16 and of bf16 bits; fma) and compiled per ISA:
// included only by the ISA files, after their V. Internal linkage.
//
// The register tile is 16 rows (R = 16 / W vectors, lanes = rows) by up to 6 tokens' broadcast activations,
// so the FMA units set the pace (AVX2: 12 accumulators of 16 registers; NEON: 24 of 32). Decode (up to 6
// tokens) widens each weight as it streams past, with several FMA chains per token; prefill widens a chunk
// of 256 inputs of 4 groups once into an fp32 buffer and runs every token tile over one group's 16 KB at a
// time (AVX2, measured: 100-105 GFLOPS per core, against 80-85 with the activations interleaved per tile
// and 25 with the weights widened per use).
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/gemm_prefetch.h"
#include "compute/cpu/packed_matrix.h"

namespace kestrel {
namespace {

constexpr int kFloatTileTokens = 6;          // tokens per register tile
constexpr int64_t kFloatGroupChunk = 4;      // row groups widened together (prefill)
constexpr size_t kFloatChunkInputs = 256;    // inputs widened together: 4 x 16 rows x 256 x 4 bytes = 64 KB
constexpr size_t kFloatPrefetchBlocks = 4;   // how far ahead weights are prefetched (blocks of 1 or 2 KB)
constexpr int kFloatBlockTokens = 16 * kFloatTileTokens;  // tokens whose chunk of activations stays in L2

// The packed weights' element type, and its bytes.
enum class FloatWeights { F16, BF16, F32 };
template <FloatWeights E>
constexpr size_t kWeightBytes = E == FloatWeights::F32 ? 4 : 2;

// W consecutive weights at p as floats.
template <class V, FloatWeights E>
inline typename V::type widen(const uint8_t* p) {
  if constexpr (E == FloatWeights::F32) return V::load(reinterpret_cast<const float*>(p));
  else if constexpr (E == FloatWeights::BF16) return V::load_bf16(reinterpret_cast<const uint16_t*>(p));
  else return V::load(reinterpret_cast<const uint16_t*>(p));
}

// The register tile: y[t, 16 rows] (+)= sum over k < n_k of w(k)[16] * x_t[k], where w(k, out) gives the R
// vectors of input k's 16 weights and x_t = x + t * x_stride. `add`: add to what y holds.
template <class V, int T, typename Weights>
inline void float_tile(const Weights& w, size_t n_k, const float* x, size_t x_stride, float* y, size_t ys, bool add) {
  constexpr int R = 16 / V::W;
  // Few tokens give few independent FMA chains: C chains per token (inputs k = c mod C), added at the end.
  constexpr int C = T == 1 ? (R == 1 ? 8 : 4) : T == 2 ? (R == 1 ? 4 : 2) : 1;
  typename V::type acc[T * C * R];  // [token][chain][row vector], flat (GCC keeps it in registers)
  for (int i = 0; i < T * C * R; ++i) acc[i] = V::zero();
  for (size_t k = 0; k < n_k; k += C)  // n_k is a multiple of 32
    for (int c = 0; c < C; ++c) {
      typename V::type wv[R];
      w(k + c, wv);
      KESTREL_UNROLL
      for (int t = 0; t < T; ++t) {
        const typename V::type xv = V::set1(x[static_cast<size_t>(t) * x_stride + k + c]);
        for (int r = 0; r < R; ++r) acc[(t * C + c) * R + r] = V::fma(wv[r], xv, acc[(t * C + c) * R + r]);
      }
    }
  KESTREL_UNROLL
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      typename V::type sum = acc[t * C * R + r];
      for (int c = 1; c < C; ++c) sum = V::add(sum, acc[(t * C + c) * R + r]);
      float* yr = y + static_cast<size_t>(t) * ys + static_cast<size_t>(r) * V::W;
      V::store(yr, add ? V::add(V::load(yr), sum) : sum);
    }
}

template <class V, typename Weights>
inline void any_float_tile(int n, const Weights& w, size_t n_k, const float* x, size_t x_stride, float* y, size_t ys, bool add) {
  switch (n) {
    case 1: return float_tile<V, 1>(w, n_k, x, x_stride, y, ys, add);
    case 2: return float_tile<V, 2>(w, n_k, x, x_stride, y, ys, add);
    case 3: return float_tile<V, 3>(w, n_k, x, x_stride, y, ys, add);
    case 4: return float_tile<V, 4>(w, n_k, x, x_stride, y, ys, add);
    case 5: return float_tile<V, 5>(w, n_k, x, x_stride, y, ys, add);
    default: return float_tile<V, kFloatTileTokens>(w, n_k, x, x_stride, y, ys, add);
  }
}

// Few tokens (decode): each group's rows streamed once from memory, widened as they are used.
template <class V, FloatWeights E>
void float_gemm_streaming(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin,
                          int64_t group_end) {
  constexpr int R = 16 / V::W;
  const size_t nb = static_cast<size_t>(w.n_blocks), n_in = nb * 32;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const uint8_t* group = w.data + static_cast<size_t>(g) * nb * w.block_bytes;
    const uint8_t* after = g + 1 < group_end ? group + nb * w.block_bytes : w.next;
    const auto weights = [&](size_t k, typename V::type* out) {
      const uint8_t* p = group + 16 * kWeightBytes<E> * k;  // input k's 16 weights (blocks are 32 inputs of them)
      // One line ahead per line consumed (a burst of a block's 16-32 lines at once stalls on the miss buffers).
      const size_t b = k / 32, in_block = (k % 32) * 16 * kWeightBytes<E>;
      if (in_block % 64 == 0)
        if (const uint8_t* a = block_ahead(group + b * w.block_bytes, b, kFloatPrefetchBlocks, nb, w.block_bytes, after))
          prefetch_line(a + in_block);
      for (int r = 0; r < R; ++r) out[r] = widen<V, E>(p + kWeightBytes<E> * V::W * r);
    };
    any_float_tile<V>(n_tok, weights, n_in, x, n_in, y + static_cast<size_t>(g) * 16, ys, w.accumulate);
  }
}

// Many tokens (prefill): a chunk of kFloatChunkInputs inputs of kFloatGroupChunk groups is widened once into
// an fp32 buffer, and every token tile passes over one group's part of it at a time (in L1).
template <class V, FloatWeights E>
void float_gemm_widened(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin,
                        int64_t group_end) {
  constexpr int R = 16 / V::W;
  const size_t nb = static_cast<size_t>(w.n_blocks), n_in = nb * 32;
  alignas(64) float widened[kFloatGroupChunk][kFloatChunkInputs][16];  // [group][input][row]: 64 KB
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kFloatGroupChunk) {
    const int64_t n_groups = group_end - g0 < kFloatGroupChunk ? group_end - g0 : kFloatGroupChunk;
    for (size_t i0 = 0; i0 < n_in; i0 += kFloatChunkInputs) {
      const size_t n_k = n_in - i0 < kFloatChunkInputs ? n_in - i0 : kFloatChunkInputs;
      for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* src = w.data + static_cast<size_t>(g0 + g) * nb * w.block_bytes + 16 * kWeightBytes<E> * i0;
        for (size_t k = 0; k < n_k; ++k)
          for (int r = 0; r < R; ++r)
            V::store(widened[g][k] + V::W * r, widen<V, E>(src + 16 * kWeightBytes<E> * k + kWeightBytes<E> * V::W * r));
      }
      const bool add = w.accumulate || i0 > 0;
      // Token blocks whose activations (96 x 1 KB) stay in L2 while each group's widened weights (16 KB,
      // in L1) meet every tile of the block.
      for (int b0 = 0; b0 < n_tok; b0 += kFloatBlockTokens) {
        const int b1 = n_tok - b0 < kFloatBlockTokens ? n_tok : b0 + kFloatBlockTokens;
        for (int64_t g = 0; g < n_groups; ++g) {
          const auto weights = [&](size_t k, typename V::type* out) {
            for (int r = 0; r < R; ++r) out[r] = V::load(widened[g][k] + V::W * r);
          };
          for (int t0 = b0; t0 < b1; t0 += kFloatTileTokens)
            any_float_tile<V>(b1 - t0, weights, n_k, x + static_cast<size_t>(t0) * n_in + i0, n_in,
                              y + static_cast<size_t>(t0) * ys + static_cast<size_t>(g0 + g) * 16, ys, add);
        }
      }
    }
  }
}

template <class V, FloatWeights E>
void float_gemm(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  if (n_tok <= kFloatTileTokens) return float_gemm_streaming<V, E>(w, x, n_tok, y, ys, group_begin, group_end);
  float_gemm_widened<V, E>(w, x, n_tok, y, ys, group_begin, group_end);
}

template <class V>
PackedGemmF32Fn float_gemm_table(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::F16Fma16: return float_gemm<V, FloatWeights::F16>;
    case PackedLayout::BF16Fma16: return float_gemm<V, FloatWeights::BF16>;
    case PackedLayout::F32Fma16: return float_gemm<V, FloatWeights::F32>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace kestrel
