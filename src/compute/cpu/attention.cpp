// Paged causal attention. The fast path (see attend_kernel) runs the per-ISA page kernels of
// attention_impl.h (float pages) and attention_quant_impl.h (quantized pages on either side) over (token,
// KV head) items. Other layouts (latent attention's shared rows, odd page sizes, narrow quantized heads, BF16
// beside another type) take the generic path below: an online softmax over runs of keys, reading rows
// through the view.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/cpu/attention.h"
#include "compute/cpu/dot.h"
#include "compute/cpu/isa.h"
#include "compute/cpu/kv_store_head.h"
#include "compute/cpu/task_grain.h"
#include "compute/kv_rotation.h"
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
  // Quantized pages (attention_quant_impl.h).
  using itype = int32_t;  // codes are non-negative, and shifts then masks keep the low bits of words
  using lut_type = const float*;
  static constexpr int kDotOffset = 0;
  static itype sub_i(itype a, itype b) { return a - b; }
  static itype load_i8x4(const uint8_t* p) {
    uint32_t x;
    std::memcpy(&x, p, 4);
    return static_cast<itype>(x);
  }
  static itype round_to_int(type x) { return static_cast<itype>(std::nearbyint(x)); }
  static void store_int16(int16_t* p, itype v) {  // into int32 words (two per word): bytes, not an int16 object
    const auto x = static_cast<int16_t>(v);
    std::memcpy(p, &x, sizeof x);
  }
  static itype load_i8x2(const uint8_t* p) {  // two signed bytes as the int16 halves of a word
    return static_cast<itype>((static_cast<uint32_t>(static_cast<int16_t>(static_cast<int8_t>(p[0]))) & 0xFFFFu) |
                              (static_cast<uint32_t>(static_cast<int16_t>(static_cast<int8_t>(p[1]))) << 16));
  }
  static itype dot2(itype acc, itype v, int32_t p2) {
    const auto lo = [](int32_t x) { return static_cast<int32_t>(static_cast<int16_t>(static_cast<uint32_t>(x) & 0xFFFFu)); };
    const auto hi = [](int32_t x) { return static_cast<int32_t>(static_cast<int16_t>(static_cast<uint32_t>(x) >> 16)); };
    return acc + lo(v) * lo(p2) + hi(v) * hi(p2);
  }
  static itype dot4(itype acc, itype k, int32_t q4) {
    for (int b = 0; b < 4; ++b)
      acc += static_cast<int8_t>(static_cast<uint32_t>(k) >> (8 * b)) * static_cast<int8_t>(static_cast<uint32_t>(q4) >> (8 * b));
    return acc;
  }
  static itype widen_u8(const uint8_t* p) { return *p; }
  static type widen_i8(const uint8_t* p) { return static_cast<float>(static_cast<int8_t>(*p)); }
  static itype srl(itype x, int n) { return static_cast<itype>(static_cast<uint32_t>(x) >> n); }
  static itype shl(itype x, int n) { return static_cast<itype>(static_cast<uint32_t>(x) << n); }
  static itype srlv(itype x, itype n) { return static_cast<itype>(static_cast<uint32_t>(x) >> n); }
  static itype and_i(itype x, int m) { return x & static_cast<itype>(m); }
  static itype or_i(itype a, itype b) { return a | b; }
  static itype add_i(itype a, itype b) { return a + b; }
  static itype set1_i(uint32_t x) { return static_cast<itype>(x); }
  static itype iota() { return 0; }
  static type to_float(itype x) { return static_cast<float>(x); }
  static type fp8(itype b) { return fp16_to_fp32(static_cast<uint16_t>(((b & 0x80) << 8) | ((b & 0x7F) << 7))); }
  static lut_type make_lut(const float* table) { return table; }
  static type lookup(lut_type t, itype idx) { return t[idx & 15]; }
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/attention_quant_impl.h"

namespace kestrel {

namespace {
Scalar::type Scalar::exp(type x) { return attend_exp_scalar(x); }
}  // namespace

AttendFn attend_kernel_baseline(bool f16) { return f16 ? attend<Scalar, uint16_t> : attend<Scalar, float>; }
AttendFn attend_quant_kernel_baseline() { return attend_pages<Scalar>; }

#if !defined(KESTREL_HAVE_X86_KERNELS)
AttendFn attend_kernel_avx2(bool) { return nullptr; }
AttendFn attend_kernel_avx512(bool) { return nullptr; }
AttendFn attend_kernel_bf16_avx512() { return nullptr; }
AttendFn attend_quant_kernel_avx2() { return nullptr; }
AttendFn attend_quant_kernel_avx512() { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_NEON_KERNELS)
AttendFn attend_kernel_neon(bool) { return nullptr; }
#endif

namespace {

AttendFn attend_float_kernel(KvType type, Isa isa) {
  if (type == KvType::BF16) return isa_includes(isa, Isa::Avx512) && cpu_has_avx512_bf16() ? attend_kernel_bf16_avx512() : nullptr;
  const bool f16 = type == KvType::F16;
  AttendFn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = attend_kernel_avx512(f16);
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = attend_kernel_avx2(f16);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = attend_kernel_neon(f16);
  return fn ? fn : attend_kernel_baseline(f16);
}

AttendFn attend_quant_kernel(Isa isa) {
  AttendFn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = attend_quant_kernel_avx512();
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = attend_quant_kernel_avx2();
  return fn ? fn : attend_quant_kernel_baseline();
}

// The page kernel for this layout, or nullptr for the generic path: transposed K pages, V pages of their own,
// head widths up to 256. K and V of one float type: pages of 4, 8 or a multiple of 16 tokens (value widths
// off the 16-lane grid finish with scalar lanes, except on pair-interleaved BF16 pages). Quantized pages on
// either side (the other quantized, F32 or F16): pages of a multiple of 16 tokens, head widths a multiple
// of 32 (one scale per 32 values) and V rows as wide as V's heads.
AttendFn attend_kernel(const KvLayerView& kv, Isa isa) {
  if (!kv.k_transposed || kv.v_in_k() || kv.k_dim > kAttendMaxDim || kv.v_dim > kAttendMaxDim) return nullptr;
  const KvTypes types = kv.types;
  if (kv_type_quantized(types.k) || kv_type_quantized(types.v)) {
    const auto readable = [](KvType t) { return attend_quantized_page(t) || attend_float_page(t); };
    return readable(types.k) && readable(types.v) && kv.block_size % kAttendTile == 0 && kv.k_dim % kQuantGroup == 0 &&
                   kv.v_dim % kQuantGroup == 0 && kv.v_stride == kv.v_dim
               ? attend_quant_kernel(isa)
               : nullptr;
  }
  if (types.k != types.v || !attend_page_size_ok(kv.block_size) || kv.k_dim % 2 != 0 ||
      (kv.v_dim % kAttendTile != 0 && types.k == KvType::BF16))
    return nullptr;
  return attend_float_kernel(types.k, isa);
}

// Multiply-adds of one (token, KV head) item of an attention call, on average over its tokens (each query head
// of the group meets every key it sees twice: scores and values), for the loops' grain (task_grain.h). An
// item's own work (its K / V row stored with RoPE, the queries loaded, the output normalised) counts as
// kItemSetupKeys keys more, so a prefill's first tokens, which see few keys, are not all run on one thread.
size_t attention_item_macs(const KvLayerView& kv, const AttentionRows& rows, int group) {
  constexpr size_t kItemSetupKeys = 16;
  if (rows.positions.empty()) return 1;
  size_t keys = 0;
  for (const int32_t p : rows.positions) keys += static_cast<size_t>(p) + 1;
  return (keys / rows.positions.size() + kItemSetupKeys) * static_cast<size_t>(group) * static_cast<size_t>(kv.k_dim + kv.v_dim);
}

// Generic path: one (token, KV head) at a time, its keys a run at a time (up to kGenericRunKeys of one page):
// the run's rows decoded once for the heads that share them (in the original basis: read_k / read_v undo
// rotations), every head's scores of the run (a vector dot each), then one online-softmax update per head
// and run (one rescale of the accumulator, one exp per key) and the run's values accumulated.
constexpr int kGenericRunKeys = 32;

void attention_generic(Isa isa, ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows, float* out,
                       int n_tok, int n_heads, float scale) {
  const int group = n_heads / kv.n_kv_heads;
  const DotFn dot = dot_kernel(DType::F32, isa);
  const size_t kd = static_cast<size_t>(kv.k_dim), vd = static_cast<size_t>(kv.v_dim);
  pool.parallel_for(static_cast<size_t>(n_tok) * kv.n_kv_heads, grain_for_macs(attention_item_macs(kv, rows, group)), [&](size_t begin, size_t end, int) {
    std::vector<float> acc(static_cast<size_t>(group) * vd);                           // [group, v_dim]
    std::vector<float> k_rows(kGenericRunKeys * kd), v_rows(kGenericRunKeys * vd);  // [run keys, k_dim / v_dim]
    std::vector<float> running_max(static_cast<size_t>(group)), denom(static_cast<size_t>(group));
    float scores[kGenericRunKeys];
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item / kv.n_kv_heads), kvh = static_cast<int>(item % kv.n_kv_heads);
      const size_t first_head = static_cast<size_t>(t) * n_heads + static_cast<size_t>(kvh) * group;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(running_max.begin(), running_max.end(), -INFINITY);
      std::fill(denom.begin(), denom.end(), 0.f);
      const int32_t n_keys = rows.positions[t] + 1;
      for (int32_t p0 = 0; p0 < n_keys;) {
        const int32_t block = rows.block_tables[t][p0 / kv.block_size];
        const int offset = p0 % kv.block_size;
        const int n = std::min({kGenericRunKeys, kv.block_size - offset, n_keys - p0});
        for (int j = 0; j < n; ++j) {
          kv.read_k(block, kvh, offset + j, k_rows.data() + static_cast<size_t>(j) * kd);
          kv.read_v(block, kvh, offset + j, v_rows.data() + static_cast<size_t>(j) * vd);
        }
        for (int g = 0; g < group; ++g) {
          const float* qh = q + (first_head + g) * kd;
          float run_max = -INFINITY;
          for (int j = 0; j < n; ++j) {
            const float* k_row = k_rows.data() + static_cast<size_t>(j) * kd;
            scores[j] = dot(k_row, qh, kd) * scale;
            run_max = std::max(run_max, scores[j]);
          }
          const float new_max = std::max(running_max[g], run_max);
          const float correction = std::exp(running_max[g] - new_max);  // 0 on the first run
          float* a = acc.data() + static_cast<size_t>(g) * vd;
          for (size_t d = 0; d < vd; ++d) a[d] *= correction;
          float sum = 0.0f;
          for (int j = 0; j < n; ++j) {
            const float weight = std::exp(scores[j] - new_max);
            sum += weight;
            const float* v_row = v_rows.data() + static_cast<size_t>(j) * vd;
            for (size_t d = 0; d < vd; ++d) a[d] += weight * v_row[d];
          }
          denom[g] = denom[g] * correction + sum;
          running_max[g] = new_max;
        }
        p0 += n;
      }
      for (int g = 0; g < group; ++g) {
        float* o = out + (first_head + g) * vd;
        for (size_t d = 0; d < vd; ++d) o[d] = acc[static_cast<size_t>(g) * vd + d] / denom[g];
      }
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

// attention_key_parts: items wanted per thread, and the fewest keys of a part.
constexpr int kItemsPerThread = 2;
constexpr int kMinPartKeys = 512;
}  // namespace

bool attention_has_page_kernel(const KvLayerView& kv, Isa isa) { return attend_kernel(kv, isa) != nullptr; }

int attention_key_parts(const AttentionRows& rows, int n_kv_heads, int n_threads) {
  const int items = static_cast<int>(rows.positions.size()) * n_kv_heads;
  if (items == 0) return 1;
  const int wanted = (kItemsPerThread * n_threads + items - 1) / items;
  if (wanted <= 1) return 1;
  const int32_t shortest = *std::min_element(rows.positions.begin(), rows.positions.end()) + 1;
  return std::max(1, std::min(wanted, static_cast<int>(shortest / kMinPartKeys)));
}

namespace {

// out[g] <- the parts' outputs weighted by their softmax mass: part_out [parts][G][dv], state [parts][G][2]
// (running max, sum of exp), each part normalized by its own sum.
void merge_key_parts(const float* part_out, const float* state, int parts, int G, int dv, float* out) {
  for (int g = 0; g < G; ++g) {
    float max = -3.0e38f;
    for (int part = 0; part < parts; ++part) {
      const float* st = state + (static_cast<size_t>(part) * G + g) * 2;
      if (st[1] > 0.0f) max = std::max(max, st[0]);
    }
    float* o = out + static_cast<size_t>(g) * dv;
    std::fill_n(o, dv, 0.0f);
    float total = 0.0f;
    for (int part = 0; part < parts; ++part) {
      const float* st = state + (static_cast<size_t>(part) * G + g) * 2;
      if (st[1] <= 0.0f) continue;  // an empty part
      const float mass = st[1] * std::exp(st[0] - max);
      const float* po = part_out + (static_cast<size_t>(part) * G + g) * dv;
      for (int i = 0; i < dv; ++i) o[i] += mass * po[i];
      total += mass;
    }
    for (int i = 0; i < dv; ++i) o[i] /= total;
  }
}

}  // namespace

void attention_paged_on(Isa isa, ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                        float* out, int n_tok, int n_heads, float scale, const ops::KvWrite* write) {
  const AttendFn attend_fn = attend_kernel(kv, isa);
  const int parts = attend_fn ? attention_key_parts(rows, kv.n_kv_heads, pool.n_threads()) : 1;
  if (write && !(attend_fn && parts == 1 && tokens_in_distinct_sequences(rows))) {
    ops::kv_store(kv, rows, *write, n_tok);
    write = nullptr;
  }
  if (!attend_fn) return attention_generic(isa, pool, q, kv, rows, out, n_tok, n_heads, scale);
  const int group = n_heads / kv.n_kv_heads;
  const bool rotated_k = kv_type_rotated(kv.types.k), rotated_v = kv_type_rotated(kv.types.v);
  float factors[kAttendMaxDim], factors_v[kAttendMaxDim];  // the rotation's diagonal (K rows, V rows), once per call
  if (rotated_k) kv_rotation_factors(kv.rotation_seed, kv.k_dim, factors);
  if (rotated_v) kv_rotation_factors(kv.rotation_seed, kv.v_dim, factors_v);
  const size_t items = static_cast<size_t>(n_tok) * kv.n_kv_heads;
  // Split items only: [items][parts][group][v_dim] outputs and [items][parts][group][2] softmax states.
  std::vector<float> part_out(parts > 1 ? items * parts * group * kv.v_dim : 0);
  std::vector<float> part_state(parts > 1 ? items * parts * group * 2 : 0);
  pool.parallel_for(items * parts, grain_for_macs(attention_item_macs(kv, rows, group) / static_cast<size_t>(parts)), [&](size_t begin, size_t end, int) {
    float scratch[kAttendMaxDim];  // one rotated K row
    std::vector<float> q_rotated(rotated_k ? static_cast<size_t>(group) * kv.k_dim : 0);  // [group, k_dim]
    for (size_t work = begin; work < end; ++work) {
      const size_t item = work / parts;
      const int part = static_cast<int>(work % parts);
      const int t = static_cast<int>(item / kv.n_kv_heads), h = static_cast<int>(item % kv.n_kv_heads);
      if (write) ops::kv_store_head(kv, rows, *write, t, h, scratch);
      const size_t first_head = static_cast<size_t>(t) * n_heads + static_cast<size_t>(h) * group;
      const float* q_heads = q + first_head * kv.k_dim;
      if (rotated_k) {  // q.k = (Rq).(Rk): rotate the group's queries once instead of every key
        std::copy_n(q_heads, q_rotated.size(), q_rotated.begin());
        for (int g = 0; g < group; ++g) kv_rotate(q_rotated.data() + static_cast<size_t>(g) * kv.k_dim, kv.k_dim, factors);
        q_heads = q_rotated.data();
      }
      // This part's keys [first_key, end_key): whole pages, the last part takes what is left.
      const int n_keys = rows.positions[t] + 1;
      const int part_keys = ((n_keys + parts - 1) / parts + kv.block_size - 1) / kv.block_size * kv.block_size;
      const int first_key = part * part_keys, end_key = std::min(n_keys, first_key + part_keys);
      float* out_heads = parts > 1 ? part_out.data() + work * group * kv.v_dim : out + first_head * kv.v_dim;
      float* state = parts > 1 ? part_state.data() + work * group * 2 : nullptr;
      if (first_key >= end_key) {  // an empty part: no mass
        std::fill_n(state, 2 * group, 0.0f);
        continue;
      }
      AttendArgs args{q_heads, group, kv.k_dim, kv.v_dim, kv.k, kv.v, kv.v_stride, kv.block_size, kv.n_blocks, h,
                      rows.block_tables[t] + first_key / kv.block_size, end_key - first_key, scale, out_heads, state, kv.types};
      attend_fn(args);
      if (rotated_v && parts == 1)  // values were summed in the rotated basis: rotate the outputs back
        for (int g = 0; g < group; ++g) kv_unrotate(out_heads + static_cast<size_t>(g) * kv.v_dim, kv.v_dim, factors_v);
    }
  });
  if (parts == 1) return;
  for (size_t item = 0; item < items; ++item) {
    const int t = static_cast<int>(item / kv.n_kv_heads), h = static_cast<int>(item % kv.n_kv_heads);
    float* out_heads = out + (static_cast<size_t>(t) * n_heads + static_cast<size_t>(h) * group) * kv.v_dim;
    merge_key_parts(part_out.data() + item * parts * group * kv.v_dim, part_state.data() + item * parts * group * 2, parts,
                    group, kv.v_dim, out_heads);
    if (rotated_v)
      for (int g = 0; g < group; ++g) kv_unrotate(out_heads + static_cast<size_t>(g) * kv.v_dim, kv.v_dim, factors_v);
  }
}

namespace ops {

void attention_paged(ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                     float* out, int n_tok, int n_heads, float scale, const KvWrite* write) {
  attention_paged_on(detected_isa(), pool, q, kv, rows, out, n_tok, n_heads, scale, write);
}

}  // namespace ops
}  // namespace kestrel
