// The rotation of rotated KV types (tq4, tq3): a randomized Hadamard transform R = H D / sqrt(n) applied
// to each block of n values of a row (n: the largest power of two dividing the row, at most 256; D: random
// signs drawn from the layer's seed and the value's index). R is orthogonal, so q.k = (Rq).(Rk): attention
// rotates the query once per head instead of every key, and accumulates values in the rotated basis and
// rotates the output back once. Rotating spreads a row's energy evenly, so each coordinate is close to
// Gaussian and a fixed Gaussian codebook fits it (TurboQuant's observation).
#pragma once
#include <cstdint>

namespace kestrel {

// Values per Hadamard block for rows of dim values.
int kv_rotation_block(int dim);
// x[dim] <- R x, and back: x[dim] <- R^T x.
void kv_rotate(float* x, int dim, uint32_t seed);
void kv_unrotate(float* x, int dim, uint32_t seed);
// The same with R's diagonal precomputed once for many rows: factors[dim] = D's signs / sqrt(block).
void kv_rotation_factors(uint32_t seed, int dim, float* factors);
void kv_rotate(float* x, int dim, const float* factors);
void kv_unrotate(float* x, int dim, const float* factors);
// The seed of a model layer's rotation.
inline uint32_t kv_rotation_seed(int layer) { return 0x5eed0000u + static_cast<uint32_t>(layer); }

}  // namespace kestrel
