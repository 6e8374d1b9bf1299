// Elementwise kernels (see elementwise.h), written once against a vector interface V (simd_*.h) and
// compiled per ISA: included only by the ISA files, after their V. Internal linkage.
#pragma once
#include <cmath>
#include <cstddef>

#include "compute/cpu/elementwise.h"

namespace kestrel {
namespace {

// silu(x) * u with e = exp(-|x|) <= 1: x / (1 + e) for x >= 0, x * e / (1 + e) below (no overflow).
template <class V>
void silu_mul_impl(float* gate, const float* up, size_t n) {
  const typename V::type one = V::set1(1.0f);
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const typename V::type x = V::load(gate + i);
    const typename V::type e = V::exp(V::sub(V::zero(), V::abs(x)));
    const typename V::type numerator = V::select_negative(x, x, V::mul(x, e));
    V::store(gate + i, V::mul(V::div(numerator, V::add(one, e)), V::load(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace
}  // namespace kestrel
