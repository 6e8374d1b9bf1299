// Paged causal attention. The fast path (transposed K pages of 4, 8 or a multiple of 16 tokens, head widths
// up to 256) runs the per-ISA page kernel of attention_impl.h over (token, KV head) items. Other layouts
// (latent attention's shared rows, odd page sizes) take the generic path below: an online softmax over one
// key at a time, reading elements through the view.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/attention.h"
#include "compute/cpu/isa.h"
#include "compute/cpu/kv_store_head.h"
#include "compute/ops.h"
#include "core/fp16.h"

namespace kestrel {
namespace {
// One lane: the portable build of the page kernel.
struct Scalar {
  using type = float;
  static constexpr int W = 1;
  static constexpr int kMaxGroup = 8;
  static constexpr int kTileKeys = 16;  // keys scored per tile
  static constexpr int kValueSlices = 1;  // value slices accumulated together
  static type zero() { return 0.0f; }
  static type set1(float x) { return x; }
  static type load(const float* p) { return *p; }
  static type load(const uint16_t* p) { return fp16_to_fp32(*p); }
  static void store(float* p, type v) { *p = v; }
  static type add(type a, type b) { return a + b; }
  static type sub(type a, type b) { return a - b; }
  static type mul(type a, type b) { return a * b; }
  static type fma(type a, type b, type c) { return a * b + c; }
  static type max(type a, type b) { return a > b ? a : b; }
  static float reduce_max(type v) { return v; }
  static float reduce_add(type v) { return v; }
  static type exp(type x);
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {

namespace {
Scalar::type Scalar::exp(type x) { return attend_exp_scalar(x); }
}  // namespace

AttendFn attend_kernel_baseline(bool f16) { return f16 ? attend<Scalar, uint16_t> : attend<Scalar, float>; }

#if !defined(KESTREL_HAVE_X86_KERNELS)
AttendFn attend_kernel_avx2(bool) { return nullptr; }
AttendFn attend_kernel_avx512(bool) { return nullptr; }
AttendFn attend_kernel_bf16_avx512() { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
AttendFn attend_kernel_neon(bool) { return nullptr; }
#endif

namespace {

AttendFn attend_kernel(KvType type, Isa isa) {
  if (type == KvType::BF16) return isa_includes(isa, Isa::Avx512) && cpu_has_avx512_bf16() ? attend_kernel_bf16_avx512() : nullptr;
  const bool f16 = type == KvType::F16;
  AttendFn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = attend_kernel_avx512(f16);
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = attend_kernel_avx2(f16);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = attend_kernel_neon(f16);
  return fn ? fn : attend_kernel_baseline(f16);
}

// Generic path: one (token, query head) at a time, key by key.
void attention_generic(ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows, float* out,
                       int n_tok, int n_heads, float scale) {
  const int group = n_heads / kv.n_kv_heads;
  pool.parallel_for(static_cast<size_t>(n_tok) * n_heads, 1, [&](size_t begin, size_t end, int) {
    std::vector<float> acc(static_cast<size_t>(kv.v_dim));  // [v_dim]
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item / n_heads), h = static_cast<int>(item % n_heads), kvh = h / group;
      const float* qh = q + item * kv.k_dim;
      float running_max = -INFINITY, denom = 0;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int32_t p = 0; p <= rows.positions[t]; ++p) {
        const int32_t block = rows.block_tables[t][p / kv.block_size];
        const int offset = p % kv.block_size;
        float s = 0;
        for (int d = 0; d < kv.k_dim; ++d) s += qh[d] * kv.k_at(block, kvh, offset, d);
        s *= scale;
        const float new_max = std::max(running_max, s);
        const float correction = std::exp(running_max - new_max), weight = std::exp(s - new_max);
        denom = denom * correction + weight;
        for (int d = 0; d < kv.v_dim; ++d) acc[d] = acc[d] * correction + weight * kv.v_at(block, kvh, offset, d);
        running_max = new_max;
      }
      float* o = out + item * kv.v_dim;
      for (int d = 0; d < kv.v_dim; ++d) o[d] = acc[d] / denom;
    }
  });
}

// Whether no two tokens belong to one sequence (share a block table), so the pass can store each
// (token, KV head) row right before attending with it: no token reads a slot another task writes.
// All pairs, stopping at the first shared table: a sequence's tokens sit together in a batch, so a prefill
// chunk stops at its second token, and only decode batches (one token per sequence, few) are compared whole.
bool tokens_in_distinct_sequences(const AttentionRows& rows) {
  const auto& tables = rows.block_tables;
  for (size_t i = 1; i < tables.size(); ++i)
    for (size_t j = i; j-- > 0;)
      if (tables[j] == tables[i]) return false;
  return true;
}

}  // namespace

void attention_paged_on(Isa isa, ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                        float* out, int n_tok, int n_heads, float scale, const ops::KvWrite* write) {
  // Value widths off the 16-lane grid finish with scalar lanes, except on BF16 pages (pair-interleaved).
  const bool fast = kv.k_transposed && !kv.v_in_k() && attend_page_size_ok(kv.block_size) &&
                    kv.k_dim <= kAttendMaxDim && kv.v_dim <= kAttendMaxDim && kv.k_dim % 2 == 0 &&
                    (kv.v_dim % kAttendTile == 0 || kv.type != KvType::BF16);
  const AttendFn attend_fn = fast ? attend_kernel(kv.type, isa) : nullptr;
  if (write && !(attend_fn && tokens_in_distinct_sequences(rows))) {
    ops::kv_store(kv, rows, *write, n_tok);
    write = nullptr;
  }
  if (!attend_fn) return attention_generic(pool, q, kv, rows, out, n_tok, n_heads, scale);
  const int group = n_heads / kv.n_kv_heads;
  pool.parallel_for(static_cast<size_t>(n_tok) * kv.n_kv_heads, 1, [&](size_t begin, size_t end, int) {
    float scratch[kAttendMaxDim];  // one rotated K row
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item / kv.n_kv_heads), h = static_cast<int>(item % kv.n_kv_heads);
      if (write) ops::kv_store_head(kv, rows, *write, t, h, scratch);
      const size_t first_head = static_cast<size_t>(t) * n_heads + static_cast<size_t>(h) * group;
      const AttendArgs args{q + first_head * kv.k_dim, group, kv.k_dim, kv.v_dim, kv.k, kv.v, kv.v_stride,
                            kv.block_size, kv.n_blocks, h, rows.block_tables[t], rows.positions[t] + 1, scale,
                            out + first_head * kv.v_dim};
      attend_fn(args);
    }
  });
}

namespace ops {

void attention_paged(ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                     float* out, int n_tok, int n_heads, float scale, const KvWrite* write) {
  attention_paged_on(detected_isa(), pool, q, kv, rows, out, n_tok, n_heads, scale, write);
}

}  // namespace ops
}  // namespace kestrel
