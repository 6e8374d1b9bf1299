#include "compute/kv_rotation.h"

#include <cmath>

namespace kestrel {
namespace {

// +1 or -1 for value i of a row under seed (a 32-bit finaliser of the pair: uncorrelated across i and seeds).
float random_sign(uint32_t seed, int i) {
  uint32_t h = seed * 0x9E3779B9u ^ (static_cast<uint32_t>(i) + 0x7F4A7C15u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h & 1u ? -1.0f : 1.0f;
}

// In-place unnormalised Walsh-Hadamard transform of n (a power of two) values: the first three stages as
// straight-line 8-point butterflies, the later ones over contiguous halves, which the compiler vectorizes.
void hadamard(float* x, int n) {
  int len = 1;
  if (n >= 8) {
    for (int i = 0; i < n; i += 8) {
      float* v = x + i;
      const float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
      const float a4 = v[4] + v[5], a5 = v[4] - v[5], a6 = v[6] + v[7], a7 = v[6] - v[7];
      const float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
      const float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
      v[0] = b0 + b4, v[1] = b1 + b5, v[2] = b2 + b6, v[3] = b3 + b7;
      v[4] = b0 - b4, v[5] = b1 - b5, v[6] = b2 - b6, v[7] = b3 - b7;
    }
    len = 8;
  }
  for (; len < n; len *= 2)
    for (int i = 0; i < n; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

constexpr int kMaxRotatedRow = 4096;

}  // namespace

int kv_rotation_block(int dim) {
  int n = 1;
  while (n < 256 && dim % (2 * n) == 0) n *= 2;
  return n;
}

void kv_rotation_factors(uint32_t seed, int dim, float* factors) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(kv_rotation_block(dim)));
  for (int i = 0; i < dim; ++i) factors[i] = random_sign(seed, i) * norm;
}

void kv_rotate(float* x, int dim, const float* factors) {
  const int n = kv_rotation_block(dim);
  for (int i = 0; i < dim; ++i) x[i] *= factors[i];
  for (int b = 0; b < dim; b += n) hadamard(x + b, n);
}

void kv_unrotate(float* x, int dim, const float* factors) {
  const int n = kv_rotation_block(dim);
  for (int b = 0; b < dim; b += n) hadamard(x + b, n);
  for (int i = 0; i < dim; ++i) x[i] *= factors[i];
}

void kv_rotate(float* x, int dim, uint32_t seed) {
  float factors[kMaxRotatedRow];
  kv_rotation_factors(seed, dim, factors);
  kv_rotate(x, dim, factors);
}

void kv_unrotate(float* x, int dim, uint32_t seed) {
  float factors[kMaxRotatedRow];
  kv_rotation_factors(seed, dim, factors);
  kv_unrotate(x, dim, factors);
}

}  // namespace kestrel
