// The activation quantizers (see q8_activations.h), written once against a vector interface V (simd_*.h)
// and compiled per ISA: included only by the ISA files, after their V. Bit-identical to the reference.
// Internal linkage.
#pragma once
#include <cmath>
#include <cstddef>

#include "compute/cpu/q8_activations.h"
#include "compute/cpu/prefetch.h"

namespace kestrel {
namespace {

// One block from its 32 values v[32 / W].
template <class V>
inline void quantize_block(const typename V::type* v, BlockQ8A& o) {
  constexpr int N = 32 / V::W;
  typename V::type m = V::abs(v[0]);
  for (int i = 1; i < N; ++i) m = V::max(m, V::abs(v[i]));
  const float amax = V::reduce_max(m);
  const float d = amax / 127.f, id = d > 0 ? 127.f / amax : 0.f;
  o.d = d;
  int32_t sums[2] = {0, 0};
  for (int i = 0; i < N; ++i) {
    const typename V::itype q = V::round_to_int(V::mul(v[i], V::set1(id)));
    sums[i * V::W / 16] += V::reduce_add(q);
    V::store_int8(o.qs + i * V::W, q);
  }
  o.sum16[0] = static_cast<int16_t>(sums[0]);
  o.sum16[1] = static_cast<int16_t>(sums[1]);
}

template <class V>
void quantize_q8a_impl(const float* x, BlockQ8A* out, size_t n) {
  constexpr int N = 32 / V::W;
  typename V::type v[N];
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    for (int i = 0; i < N; ++i) v[i] = V::load(x + i * V::W);
    quantize_block<V>(v, out[b]);
  }
}

template <class V>
void quantize_norm_q8a_impl(const float* x, const float* weight, float eps, BlockQ8A* out, size_t n) {
  // Sum of squares as ops::rmsnorm: in double, lane k summing x[i] for i = k mod 8 in order.
  // The norm weights were last read a whole decode step ago: request them now, so they arrive while the
  // sum of squares runs instead of one stall after another in the quantizing loop.
  for (size_t i = 0; i < n; i += 16) prefetch_line(weight + i);
  double p[8] = {};
  V::sum_squares8(x, n, p);
  const double ss = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  const typename V::type scale = V::set1(1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps));
  constexpr int N = 32 / V::W;
  typename V::type v[N];
  for (size_t b = 0; b < n / 32; ++b, x += 32, weight += 32) {
    for (int i = 0; i < N; ++i) v[i] = V::mul(V::mul(V::load(x + i * V::W), scale), V::load(weight + i * V::W));
    quantize_block<V>(v, out[b]);
  }
}

}  // namespace
}  // namespace kestrel
