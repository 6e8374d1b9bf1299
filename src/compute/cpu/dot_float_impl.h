// Float row dots (F32, F16 and BF16 weight rows against float activations), written once against a vector
// interface V (simd_*.h: load of floats, of fp16 and of bf16 bits, fma, add, reduce_add) and compiled per
// ISA: included only by the ISA files, after their V. F16/BF16 tails go through a zero-padded vector, so no
// scalar conversion (an inline library function the linker could share with baseline code) is compiled
// here; F32 tails are plain scalar multiply-adds (short rows, such as 8-wide heads, are all tail).
// Internal linkage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "compute/cpu/dot.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

// sum_i w[i] * x[i]: four independent chains of W lanes; `load` reads W weights as floats.
template <class V, typename T, typename Load>
float dot_float_row(const T* w, const float* x, size_t n, Load load) {
  constexpr size_t W = V::W;
  typename V::type a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 = V::fma(load(w + i), V::load(x + i), a0);
    a1 = V::fma(load(w + i + W), V::load(x + i + W), a1);
    a2 = V::fma(load(w + i + 2 * W), V::load(x + i + 2 * W), a2);
    a3 = V::fma(load(w + i + 3 * W), V::load(x + i + 3 * W), a3);
  }
  for (; i + W <= n; i += W) a0 = V::fma(load(w + i), V::load(x + i), a0);
  if constexpr (std::is_same_v<T, float>) {  // float tails in scalar: a staged vector would stall on its stores
    float tail = 0.0f;
    for (; i < n; ++i) tail += w[i] * x[i];
    return V::reduce_add(V::add(V::add(a0, a1), V::add(a2, a3))) + tail;
  }
  if (i < n) {  // the last n - i elements, zero-padded to one vector
    T wt[W] = {};
    float xt[W] = {};
    std::memcpy(wt, w + i, (n - i) * sizeof(T));
    std::memcpy(xt, x + i, (n - i) * sizeof(float));
    a1 = V::fma(load(wt), V::load(xt), a1);
  }
  return V::reduce_add(V::add(V::add(a0, a1), V::add(a2, a3)));
}

template <class V>
float dot_f32_impl(const void* row, const float* x, size_t n) {
  return dot_float_row<V>(static_cast<const float*>(row), x, n, [](const float* p) { return V::load(p); });
}
template <class V>
float dot_f16_impl(const void* row, const float* x, size_t n) {
  return dot_float_row<V>(static_cast<const uint16_t*>(row), x, n, [](const uint16_t* p) { return V::load(p); });
}
template <class V>
float dot_bf16_impl(const void* row, const float* x, size_t n) {
  return dot_float_row<V>(static_cast<const uint16_t*>(row), x, n, [](const uint16_t* p) { return V::load_bf16(p); });
}

// FP8 E4M3 blocks (quant/blocks.h): each block's 32 codes widened to F16 bits of value / 256 (exact: the
// F16 exponent field holds E4M3's, whose bias is 8 less; quant/fp8.h), loaded as an F16 row, times the
// block's scale (broadcast through the same F16 load); the sum times 256.
template <class V>
float dot_fp8_impl(const void* row, const float* x, size_t n) {
  constexpr int kChains = kQK / V::W;  // one accumulator per vector of a block: independent FMA chains
  const auto* blocks = static_cast<const BlockFP8*>(row);
  typename V::type acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = V::zero();
  uint16_t h[kQK], scale[V::W];  // one block's codes as F16 bits; its scale in every lane
  for (size_t b = 0; b < n / kQK; ++b) {
    for (int j = 0; j < kQK; ++j) {
      const unsigned code = blocks[b].qs[j];
      h[j] = static_cast<uint16_t>(((code & 0x80u) << 8) | ((code & 0x7Fu) << 7));
    }
    for (int j = 0; j < V::W; ++j) scale[j] = blocks[b].d;
    const typename V::type d = V::load(scale);
    for (int c = 0; c < kChains; ++c)
      acc[c] = V::fma(V::mul(V::load(h + c * V::W), d), V::load(x + b * kQK + c * V::W), acc[c]);
  }
  for (int c = 1; c < kChains; ++c) acc[0] = V::add(acc[0], acc[c]);
  return 256.0f * V::reduce_add(acc[0]);
}

// The float types' kernels; nullptr for the block types (matmul dots those with the integer kernels).
template <class V>
DotFn dot_float_table(DType type) {
  switch (type) {
    case DType::F32: return dot_f32_impl<V>;
    case DType::F16: return dot_f16_impl<V>;
    case DType::BF16: return dot_bf16_impl<V>;
    case DType::FP8_E4M3: return dot_fp8_impl<V>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace kestrel
