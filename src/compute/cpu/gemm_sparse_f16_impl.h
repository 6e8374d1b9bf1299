// The 2:4 F16 layout's prefill (S24_F16x16, compute/cpu/packed_sparse24.h): groups expanded into the
// F16Fma16 layout, kFloatGroupChunk at a time as the dense GEMM widens them together, then the float GEMM
// of gemm_float_impl.h on vector type V; the weights stay exact, as in the sparse decode tiles. Included
// by the ISA files after gemm_float_impl.h (AVX2 and AVX-512); internal linkage.
#pragma once
#include <immintrin.h>

#include "compute/cpu/gemm_float_impl.h"
#include "compute/cpu/packed_sparse24.h"

namespace kestrel {
namespace {

// Group g in the F16Fma16 layout at out [n_blocks * 2][32 inputs][16 rows] fp16: per input of a group, each
// row's first kept value where it is the row's lower kept input, its second where the higher, else zero.
inline void expand_sparse_f16_group(const PackedView& w, int64_t g, uint8_t* out) {
  const __m256i zero = _mm256_setzero_si256(), low4 = _mm256_set1_epi16(0xF);
  for (int64_t b = 0; b < w.n_blocks; ++b) {
    const uint8_t* blk = w.data + static_cast<size_t>(g * w.n_blocks + b) * w.block_bytes;
    auto* dst = reinterpret_cast<__m256i*>(out + static_cast<size_t>(b) * 2048);  // [64 inputs] x 16 fp16
    for (int k = 0; k < 16; ++k) {
      const __m256i masks16 = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + sparse24_masks_offset(PackedLayout::S24_F16x16) + 16 * (k / 2))));
      const __m256i m = _mm256_and_si256(k % 2 ? _mm256_srli_epi16(masks16, 4) : masks16, low4);  // [16 rows]
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * k));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * k + 32));
      for (int j = 0; j < 4; ++j) {
        const __m256i kept = _mm256_cmpgt_epi16(_mm256_and_si256(m, _mm256_set1_epi16(static_cast<short>(1 << j))), zero);
        const __m256i lower = _mm256_cmpeq_epi16(_mm256_and_si256(m, _mm256_set1_epi16(static_cast<short>((1 << j) - 1))), zero);
        _mm256_storeu_si256(dst + 4 * k + j, _mm256_and_si256(kept, _mm256_blendv_epi8(v1, v0, lower)));
      }
    }
  }
}

template <class V>
void sparse_f16_prefill(PackedView w, const float* x, int n_tok, float* y, size_t ys, int64_t group_begin, int64_t group_end) {
  const size_t group_bytes = sparse24_f16_dense_group_bytes(w.n_blocks * 64);
  uint8_t* dense = sparse24_group_buffer(static_cast<size_t>(kFloatGroupChunk) * group_bytes);  // [chunk] groups, F16Fma16
  for (int64_t g0 = group_begin; g0 < group_end; g0 += kFloatGroupChunk) {
    const int64_t n = group_end - g0 < kFloatGroupChunk ? group_end - g0 : kFloatGroupChunk;
    for (int64_t i = 0; i < n; ++i) expand_sparse_f16_group(w, g0 + i, dense + static_cast<size_t>(i) * group_bytes);
    const PackedView d{dense, w.n_blocks * 2, 1024, nullptr, w.accumulate};
    float_gemm<V, FloatWeights::F16>(d, x, n_tok, y + static_cast<size_t>(g0) * 16, ys, 0, n);
  }
}

}  // namespace
}  // namespace kestrel
