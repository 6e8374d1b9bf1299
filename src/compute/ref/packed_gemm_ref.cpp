// References for the packed GEMM kernels (compute/cpu/packed_matrix.h): the packed bytes decoded row by
// row (unpack_block_row), dotted with the activations in double.
#include "compute/cpu/packed_matrix.h"
#include "core/fp16.h"

namespace kestrel {

namespace {
// Reference: decode the packed weights, dot them with the dequantized activations in double.
template <PackedLayout L>
void reference(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t y_stride, int64_t group_begin,
               int64_t group_end) {
  constexpr int kInputs = packed_block_inputs(L);
  const int64_t nb = w.n_blocks;
  const size_t nxb = static_cast<size_t>(nb) * kInputs / 32;  // activation blocks per token
  float weights[kInputs];
  for (int64_t g = group_begin; g < group_end; ++g)
    for (int i = 0; i < PackedMatrix::kRows; ++i)
      for (int t = 0; t < n_tok; ++t) {
        double sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          unpack_block_row(L, w.data + static_cast<size_t>(g * nb + b) * w.block_bytes, i, weights);
          for (int k = 0; k < kInputs; ++k) {
            const BlockQ8A& xb = xq[static_cast<size_t>(t) * nxb + static_cast<size_t>(b) * (kInputs / 32) + k / 32];
            sum += static_cast<double>(weights[k]) * xb.d * xb.qs[k % 32];
          }
        }
        float& out = y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(g) * PackedMatrix::kRows + i];
        out = w.accumulate ? out + static_cast<float>(sum) : static_cast<float>(sum);
      }
}
}  // namespace

namespace {
// Reference for the float layouts: the decoded weights of layout L dotted in double with activation
// act(t, i) (input i of token t).
template <PackedLayout L, typename Act>
void float_reference(PackedView w, int n_tok, float* y, size_t y_stride, int64_t group_begin, int64_t group_end,
                     const Act& act) {
  constexpr int kInputs = packed_block_inputs(L);
  const int64_t nb = w.n_blocks;
  float weights[kInputs];
  for (int64_t g = group_begin; g < group_end; ++g)
    for (int i = 0; i < PackedMatrix::kRows; ++i)
      for (int t = 0; t < n_tok; ++t) {
        double sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          unpack_block_row(L, w.data + static_cast<size_t>(g * nb + b) * w.block_bytes, i, weights);
          for (int k = 0; k < kInputs; ++k) sum += static_cast<double>(weights[k]) * act(t, static_cast<size_t>(b * kInputs + k));
        }
        float& out = y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(g) * PackedMatrix::kRows + i];
        out = w.accumulate ? out + static_cast<float>(sum) : static_cast<float>(sum);
      }
}

template <PackedLayout L>
void f32_reference(PackedView w, const float* x, int n_tok, float* y, size_t y_stride, int64_t group_begin,
                   int64_t group_end) {
  const size_t n_in = static_cast<size_t>(w.n_blocks) * packed_block_inputs(L);
  float_reference<L>(w, n_tok, y, y_stride, group_begin, group_end,
                     [&](int t, size_t i) { return x[static_cast<size_t>(t) * n_in + i]; });
}
}  // namespace

void packed_gemm_bf16_reference(PackedView w, const uint16_t* xb, int n_tok, float* y, size_t y_stride,
                                int64_t group_begin, int64_t group_end) {
  const size_t n_in = static_cast<size_t>(w.n_blocks) * 32;
  float_reference<PackedLayout::BF16x16>(w, n_tok, y, y_stride, group_begin, group_end,
                                         [&](int t, size_t i) { return bf16_to_fp32(xb[static_cast<size_t>(t) * n_in + i]); });
}

PackedGemmF32Fn packed_gemm_f32_reference(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::F16Fma16: return f32_reference<PackedLayout::F16Fma16>;
    case PackedLayout::BF16Fma16: return f32_reference<PackedLayout::BF16Fma16>;
    case PackedLayout::F32Fma16: return f32_reference<PackedLayout::F32Fma16>;
    case PackedLayout::S24_F16x16: return f32_reference<PackedLayout::S24_F16x16>;
    default: return nullptr;
  }
}

PackedGemmFn packed_gemm_reference(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::BF16x16: return nullptr;  // takes bf16 activations: packed_gemm_bf16_reference
    case PackedLayout::F16Fma16:
    case PackedLayout::BF16Fma16:
    case PackedLayout::F32Fma16:
    case PackedLayout::S24_F16x16: return nullptr;  // take float activations: packed_gemm_f32_reference
    case PackedLayout::Q4_0x16: return reference<PackedLayout::Q4_0x16>;
    case PackedLayout::Q8_0x16: return reference<PackedLayout::Q8_0x16>;
    case PackedLayout::Q4_Kx16: return reference<PackedLayout::Q4_Kx16>;
    case PackedLayout::Q6_Kx16: return reference<PackedLayout::Q6_Kx16>;
    case PackedLayout::Q4_1x16: return reference<PackedLayout::Q4_1x16>;
    case PackedLayout::Q5_0x16: return reference<PackedLayout::Q5_0x16>;
    case PackedLayout::Q5_1x16: return reference<PackedLayout::Q5_1x16>;
    case PackedLayout::Q5_Kx16: return reference<PackedLayout::Q5_Kx16>;
    case PackedLayout::Q2_Kx16: return reference<PackedLayout::Q2_Kx16>;
    case PackedLayout::Q3_Kx16: return reference<PackedLayout::Q3_Kx16>;
    case PackedLayout::S24_Q8x16: return reference<PackedLayout::S24_Q8x16>;
    case PackedLayout::S24_Q4x16: return reference<PackedLayout::S24_Q4x16>;
  }
  return nullptr;
}

}  // namespace kestrel
