// The reference activation quantizers (compute/cpu/q8_activations.h): every ISA's kernel gives these blocks
// bit for bit.
#include <cmath>
#include <vector>

#include "compute/cpu/q8_activations.h"
#include "compute/ops.h"

namespace kestrel {

void quantize_activations_q8a(const float* x, BlockQ8A* out, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) {
      const float a = x[i] < 0 ? -x[i] : x[i];
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.f, id = d > 0 ? 127.f / amax : 0.f;
    BlockQ8A& o = out[b];
    o.d = d;
    int sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(x[i] * id));
      o.qs[i] = static_cast<int8_t>(q);
      sums[i / 16] += q;
    }
    o.sum16[0] = static_cast<int16_t>(sums[0]);
    o.sum16[1] = static_cast<int16_t>(sums[1]);
  }
}

void quantize_norm_activations_q8a(const float* x, const float* weight, float eps, BlockQ8A* out, size_t n) {
  std::vector<float> normed(n);  // [n]
  ops::rmsnorm(x, weight, normed.data(), 1, static_cast<int>(n), eps);
  quantize_activations_q8a(normed.data(), out, n);
}

}  // namespace kestrel
