// Float row dots (F32, F16 and BF16 weight rows against float activations), written once against a vector
// interface V (simd_*.h: load of floats, of fp16 and of bf16 bits, fma, add, reduce_add) and compiled per
// ISA: included only by the ISA files, after their V. Tails go through a zero-padded vector, so no scalar
// conversion (an inline library function the linker could share with baseline code) is compiled here.
// Internal linkage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compute/cpu/dot.h"

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

// The float types' kernels; nullptr for the block types (matmul dots those with the integer kernels).
template <class V>
DotFn dot_float_table(DType type) {
  switch (type) {
    case DType::F32: return dot_f32_impl<V>;
    case DType::F16: return dot_f16_impl<V>;
    case DType::BF16: return dot_bf16_impl<V>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace kestrel
