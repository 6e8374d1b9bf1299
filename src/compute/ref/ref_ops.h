// Slow, obvious reference implementations — the executable spec that fast kernels are tested against.
#pragma once
#include <vector>

#include "compute/ops.h"

namespace kestrel::ref {

// sum_i w[i] * x[i] with w decoded by the reference dequantizer, accumulated in double.
double dot(DType type, const void* row, const float* x, size_t n);
// y[n_tok, n_out] = x[n_tok, n_in] . W^T via dot().
void matmul(const WeightMatrix& w, const float* x, float* y, int n_tok);
// Full-softmax causal attention over the same paged layout: gathers every key, scores them all.
void attention(const float* q, const KvLayerView& kv, const AttentionRows& rows, float* out, int n_tok, int n_heads,
               float scale);

// y[n_tok, n] = x / sqrt(mean(x^2) + eps) * weight, in double.
void rmsnorm(const float* x, const float* weight, float* y, int n_tok, int n, float eps);
// Rotates the first n_rot dims of every head of x [n_tok, n_heads, head_dim] by the angle
// positions[t] * (freq_base^(-2i / n_rot) / freq_factors[i]) of each pair i, computed in double.
void rope(float* x, std::span<const int32_t> positions, int n_heads, int head_dim, int n_rot, float freq_base,
          RopeStyle style, const float* freq_factors = nullptr);

}  // namespace kestrel::ref
