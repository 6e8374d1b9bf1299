// Elementwise and normalisation ops (the compiler vectorises these loops) and the KV write.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/cpu/elementwise.h"
#include "compute/cpu/kv_store_head.h"
#include "compute/ops.h"
#include "core/fp16.h"

namespace kestrel {

WeightMatrix WeightMatrix::from(const TensorView& t, int64_t expert) {
  WeightMatrix w;
  w.type = t.type;
  w.n_in = t.ne[0];
  w.n_out = t.ne[1];
  w.row_bytes = t.row_bytes();
  w.data = t.data + static_cast<size_t>(expert) * static_cast<size_t>(w.n_out) * w.row_bytes;
  return w;
}

namespace ops {

void rmsnorm(ThreadPool& pool, const float* x, const float* weight, float* y, int n_tok, int n, float eps) {
  const size_t grain = std::max<size_t>(1, 16384 / static_cast<size_t>(std::max(1, n)));  // rows per task
  pool.parallel_for(static_cast<size_t>(n_tok), grain, [&](size_t begin, size_t end, int) {
    const size_t offset = begin * static_cast<size_t>(n);
    rmsnorm(x + offset, weight, y + offset, static_cast<int>(end - begin), n, eps);
  });
}

void rmsnorm(const float* x, const float* weight, float* y, int n_tok, int n, float eps) {
  for (int t = 0; t < n_tok; ++t) {
    const float* xr = x + static_cast<size_t>(t) * n;
    float* yr = y + static_cast<size_t>(t) * n;
    // Eight partial sums (in double, as the reference) so the additions do not wait on each other: a
    // single chain of n dependent adds made a decode step's norms ~1% of its time.
    double part[8] = {};
    int i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(xr[i + k]) * xr[i + k];
    for (; i < n; ++i) part[0] += static_cast<double>(xr[i]) * xr[i];
    const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
    for (int i = 0; i < n; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

RopeTable rope_table(std::span<const int32_t> positions, int n_rot, float freq_base, const float* freq_factors) {
  const size_t half = static_cast<size_t>(n_rot / 2);
  std::vector<float> inv_freq(half);  // [n_rot / 2]
  for (size_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot)) /
                  (freq_factors ? freq_factors[i] : 1.0f);
  RopeTable table{n_rot, std::vector<float>(positions.size() * half), std::vector<float>(positions.size() * half)};
  for (size_t t = 0; t < positions.size(); ++t)
    for (size_t i = 0; i < half; ++i) {
      const float theta = static_cast<float>(positions[t]) * inv_freq[i];
      table.cos[t * half + i] = std::cos(theta);
      table.sin[t * half + i] = std::sin(theta);
    }
  return table;
}

namespace {
// Rotates one head's first 2 * half dims by token t's angles.
void rope_head(float* head, const RopeTable& table, size_t t, RopeStyle style) {
  const size_t half = static_cast<size_t>(table.n_rot / 2);
  const float* cos = table.cos.data() + t * half;
  const float* sin = table.sin.data() + t * half;
  for (size_t i = 0; i < half; ++i) {
    const size_t a = style == RopeStyle::Interleaved ? 2 * i : i;
    const size_t b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cos[i] - x1 * sin[i];
    head[b] = x0 * sin[i] + x1 * cos[i];
  }
}
}  // namespace

void rope(float* x, const RopeTable& table, int n_heads, int head_dim, RopeStyle style) {
  const size_t half = static_cast<size_t>(table.n_rot / 2), n_tok = half ? table.cos.size() / half : 0;
  for (size_t t = 0; t < n_tok; ++t)
    for (int h = 0; h < n_heads; ++h)
      rope_head(x + (t * static_cast<size_t>(n_heads) + static_cast<size_t>(h)) * static_cast<size_t>(head_dim), table, t,
                style);
}

void add_bias(float* x, const float* b, int n_tok, int n) {
  for (int t = 0; t < n_tok; ++t) add(x + static_cast<size_t>(t) * n, b, n);
}

void add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

void silu_mul(ThreadPool& pool, float* gate, const float* up, size_t n) {
  const SiluMulFn kernel = silu_mul_kernel(detected_isa());
  constexpr size_t kGrain = 16384;  // below this one thread is quicker than a round trip
  pool.parallel_for(n, kGrain, [&](size_t begin, size_t end, int) { kernel(gate + begin, up + begin, end - begin); });
}

void softmax(float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - max));
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

void kv_store_head(const KvLayerView& kv, const AttentionRows& rows, const KvWrite& w, int t, int h, float* scratch) {
  const int32_t pos = rows.positions[t];
  const int32_t block = rows.block_tables[t][pos / kv.block_size];
  const int offset = pos % kv.block_size;
  const size_t row = static_cast<size_t>(t) * kv.n_kv_heads + h;
  const float* k_row = w.k + row * kv.k_dim;
  if (w.k_rope) {
    std::copy_n(k_row, kv.k_dim, scratch);
    rope_head(scratch, *w.k_rope, static_cast<size_t>(t), w.style);
    k_row = scratch;
  }
  kv.write_k(block, h, offset, k_row);
  if (!kv.v_in_k()) kv.write_v(block, h, offset, w.v + row * kv.v_dim);
}

void kv_store(const KvLayerView& kv, const AttentionRows& rows, const KvWrite& w, int n_tok) {
  std::vector<float> scratch(static_cast<size_t>(kv.k_dim));  // [k_dim] one K row after RoPE
  for (int t = 0; t < n_tok; ++t)
    for (int h = 0; h < kv.n_kv_heads; ++h) kv_store_head(kv, rows, w, t, h, scratch.data());
}

}  // namespace ops
}  // namespace kestrel

namespace kestrel {

#if !defined(KESTREL_HAVE_X86_KERNELS)
SiluMulFn silu_mul_kernel_avx2() { return nullptr; }
SiluMulFn silu_mul_kernel_avx512() { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
SiluMulFn silu_mul_kernel_neon() { return nullptr; }
#endif

SiluMulFn silu_mul_kernel(Isa isa) {
  SiluMulFn fn = isa_includes(isa, Isa::Avx512) ? silu_mul_kernel_avx512() : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = silu_mul_kernel_avx2();
  if (!fn && isa_includes(isa, Isa::Neon)) fn = silu_mul_kernel_neon();
  return fn ? fn : silu_mul_reference;
}

}  // namespace kestrel
