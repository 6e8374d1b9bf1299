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

// In-place unnormalised Walsh-Hadamard transform of n (a power of two) values.
void hadamard(float* x, int n) {
  for (int len = 1; len < n; len *= 2)
    for (int i = 0; i < n; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

}  // namespace

int kv_rotation_block(int dim) {
  int n = 1;
  while (n < 256 && dim % (2 * n) == 0) n *= 2;
  return n;
}

void kv_rotate(float* x, int dim, uint32_t seed) {
  const int n = kv_rotation_block(dim);
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < dim; ++i) x[i] *= random_sign(seed, i) * norm;
  for (int b = 0; b < dim; b += n) hadamard(x + b, n);
}

void kv_unrotate(float* x, int dim, uint32_t seed) {
  const int n = kv_rotation_block(dim);
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int b = 0; b < dim; b += n) hadamard(x + b, n);
  for (int i = 0; i < dim; ++i) x[i] *= random_sign(seed, i) * norm;
}

}  // namespace kestrel
