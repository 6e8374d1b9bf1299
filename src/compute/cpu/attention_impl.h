// Paged attention kernel for one (query token, KV head): the G query heads that share the KV head are
// scored together against tiles of transposed K (one vector op per dimension covers a vector's keys; a tile
// is V::kTileKeys keys, 32 for AVX-512, so the heads' score registers form enough independent FMA chains),
// folded into an online softmax once per 128-key chunk, and the chunk's V rows are accumulated for all G
// heads, several value slices at a time for the same reason.
// Written once over a small vector interface and compiled per ISA: included by attention.cpp (scalar),
// attention_avx2.cpp and attention_avx512.cpp, each of which defines its vector type first (see
// attend_chunk). Everything here has internal linkage and uses no library code, so ISA copies never mix.
// Key widths may be any even number; value widths that are not a multiple of the vector width finish with
// scalar lanes (tiny models: stories260K's heads are 8 wide). Pages hold a multiple of
// 16 tokens, or 4 or 8: then a vector's 16 keys span several pages and its lanes are assembled from the
// pages' rows (V::load2 / V::load4 join halves / quarters), so small pages keep the same kernel.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/cpu/prefetch.h"
#include "compute/kv_quant.h"

namespace kestrel {

// Plain data for one work item (see attention.cpp).
struct AttendArgs {
  const float* q;        // [G, d] query heads sharing this KV head
  int G, d, dv;          // heads in the group, key and value widths
  const void* k;         // layer K base: pages [kv_head][block] of [d][block_size] (layouts: KvLayerView)
  const void* v;         // layer V base: pages [kv_head][block] of [block_size][v_stride]
  int v_stride;
  int block_size;        // a multiple of kAttendTile, or 4 or 8
  int n_blocks, kv_head;  // pages per KV head (pages are ordered [kv_head][block]); this item's head
  const int32_t* table;  // the sequence's block table
  int n_keys;            // attend to positions [0, n_keys)
  float scale;
  float* out;            // [G, dv]
  float* softmax_state = nullptr;  // [G, 2] if set: each head's running max and sum of exp(score - max), so
                                   // the outputs of key ranges attended apart can be merged (attention.cpp)
  KvTypes types{};                 // of K and V pages (the quantized-page kernels read them; float kernels know theirs)
};
constexpr int kAttendTile = 16;    // page sizes must be a multiple of this (or 4 or 8); tiles are too
constexpr int kAttendChunk = 128;  // keys per softmax update (a multiple of kAttendTile)
constexpr int kAttendPrefetchKeys = 128;  // how far ahead of the kernel pages are prefetched (PageStreamPrefetch)
constexpr int kAttendMaxDim = 256;  // largest head width it handles (a multiple of 16)
// Page sizes the kernels handle.
inline bool attend_page_size_ok(int block_size) {
  return block_size % kAttendTile == 0 || block_size == 4 || block_size == 8;
}

namespace {

// exp(x) for x <= 0 within ~2e-7 relative: 2^(x log2 e) as a rounded integer power of two times a degree-6
// polynomial on [-0.5, 0.5] (the vector types implement the same scheme).
inline float attend_exp_scalar(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.44269504f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer
  const float f = (t - n) * 0.693147181f;
  float p = 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * __builtin_bit_cast(float, bits);
}

// The K rows of one vector of a tile: SPLIT parts of W / SPLIT keys, each from its own page.
template <typename V, typename T, int SPLIT>
typename V::type attend_load_keys(const T* const* parts, size_t row) {
  if constexpr (SPLIT == 1) return V::load(parts[0] + row);
  else if constexpr (SPLIT == 2) return V::load2(parts[0] + row, parts[1] + row);
  else return V::load4(parts[0] + row, parts[1] + row, parts[2] + row, parts[3] + row);
}

// Pages lie anywhere in memory, so hardware prefetchers lose the stream at each page: the kernels prefetch
// the K and V pages of a's sequence themselves, in key order (a page's K lines then its V lines), up to
// ahead_keys keys past where the kernel is (advance_to) and at most per_step lines per step() of its
// streaming loops. A few lines per step keep memory busy without stalling the loads the kernel waits for
// (a burst of a hundred prefetches would); per_step a little above the kernel's own rate lets the stream
// catch up after a stall (attend_stream_rate). While the kernel is at key 0 (its first tile, whose pages
// come cold anyway) the stream runs at first_per_step instead, to get the pages up to the prefetch distance
// requested before the kernel reaches them.
class PageStreamPrefetch {
 public:
  PageStreamPrefetch(const AttendArgs& a, size_t k_page_bytes, size_t v_page_bytes, int ahead_keys, int first_per_step,
                     int per_step)
      : a_(&a), k_page_bytes_(k_page_bytes), v_page_bytes_(v_page_bytes), k_lines_(static_cast<int>((k_page_bytes + 63) / 64)),
        page_lines_(k_lines_ + static_cast<int>((v_page_bytes + 63) / 64)), ahead_keys_(ahead_keys),
        first_per_step_(first_per_step), steady_per_step_(per_step), n_pages_((a.n_keys + a.block_size - 1) / a.block_size) {
    set_page(0);
  }

  // The kernel is at key `key`: pages up to key + ahead_keys become due.
  void advance_to(int key) {
    const int last = (key + ahead_keys_ + a_->block_size - 1) / a_->block_size;
    due_ = last < n_pages_ ? last : n_pages_;
    per_step_ = key == 0 ? first_per_step_ : steady_per_step_;
  }

  void step() {
    for (int i = 0; i < per_step_ && page_ < due_; ++i) {
      prefetch_line(line_ < k_lines_ ? k_ + 64 * line_ : v_ + 64 * (line_ - k_lines_));
      if (++line_ == page_lines_) set_page(page_ + 1);
    }
  }

 private:
  void set_page(int page) {
    page_ = page;
    line_ = 0;
    if (page >= n_pages_) return;
    const size_t slot = static_cast<size_t>(a_->kv_head) * a_->n_blocks + a_->table[page];
    k_ = static_cast<const char*>(a_->k) + slot * k_page_bytes_;
    v_ = static_cast<const char*>(a_->v) + slot * v_page_bytes_;
  }

  const AttendArgs* a_;
  size_t k_page_bytes_, v_page_bytes_;
  int k_lines_, page_lines_, ahead_keys_, first_per_step_, steady_per_step_, n_pages_;
  int per_step_ = 0;
  int page_ = 0, line_ = 0, due_ = 0;  // the next line to fetch; pages before due_ are due
  const char* k_ = nullptr;  // the current page's K and V
  const char* v_ = nullptr;
};

// Lines per step for a kernel that takes `steps` steps of its streaming loops per `keys` keys of key_bytes
// (K and V) each: the pages' rate, rounded up, and half again to catch up after a stall.
inline int attend_stream_rate(size_t key_bytes, int keys, int steps) {
  const size_t lines = (key_bytes * static_cast<size_t>(keys) + 63) / 64;
  return static_cast<int>((3 * lines + 2 * static_cast<size_t>(steps) - 1) / (2 * static_cast<size_t>(steps)));
}

// The maxima of one chunk's scores p[g][0, n) (the lanes up to `padded`, a multiple of W, are set to a
// masked score): per head the chunk's max, the running max m[g] moved up to it, and the factors that move
// sums relative to the old running max (correction) and to the chunk's max (chunk_weight) onto the new one.
// Heads are interleaved in every loop, so their dependency chains overlap.
template <typename V, int GC>
void attend_chunk_maxima(float (*p)[kAttendChunk], int n, int padded, float* m, float* chunk_max, float* correction,
                         float* chunk_weight) {
  using vec = typename V::type;
  constexpr int W = V::W;
  vec mx[GC];
  for (int g = 0; g < GC; ++g) {
    for (int j = n; j < padded; ++j) p[g][j] = -3.0e38f;  // keys past the end
    mx[g] = V::load(p[g]);
  }
  for (int j = W; j < padded; j += W)
    for (int g = 0; g < GC; ++g) mx[g] = V::max(mx[g], V::load(p[g] + j));
  for (int g = 0; g < GC; ++g) chunk_max[g] = V::reduce_max(mx[g]);
  for (int g = 0; g < GC; ++g) {
    const float new_max = m[g] > chunk_max[g] ? m[g] : chunk_max[g];
    correction[g] = attend_exp_scalar(m[g] - new_max);
    chunk_weight[g] = attend_exp_scalar(chunk_max[g] - new_max);
    m[g] = new_max;
  }
}

// One online-softmax update per head for a whole chunk: p[g][0, n) holds the chunk's scores (padded to a
// multiple of W with masked keys). Their exponentials go, a vector at a time, to store(g, j, e) (head g, keys
// j .. j + W) in whatever form the kernel's value pass reads: relative to the new running max m[g], or with
// CHUNK_RELATIVE to the chunk's own max, where one unit is worth weight[g] = exp(chunk max - new max) (so a
// chunk far below the running max keeps its precision). l[g] gains the chunk's sum and the accumulators
// acc[g][0, dv) are rescaled to the new max.
template <typename V, int GC, bool CHUNK_RELATIVE = false, typename Store>
void attend_softmax_update_with(float (*p)[kAttendChunk], int n, int padded, float* m, float* l, float (*acc)[kAttendMaxDim],
                                int dv, float* weight, Store store) {
  using vec = typename V::type;
  constexpr int W = V::W;
  float chunk_max[GC], correction[GC];
  attend_chunk_maxima<V, GC>(p, n, padded, m, chunk_max, correction, weight);
  vec shift[GC], sum[GC];
  for (int g = 0; g < GC; ++g) shift[g] = V::set1(CHUNK_RELATIVE ? chunk_max[g] : m[g]), sum[g] = V::zero();
  for (int j = 0; j < padded; j += W)
    for (int g = 0; g < GC; ++g) {
      const vec e = V::exp(V::sub(V::load(p[g] + j), shift[g]));
      store(g, j, e);
      sum[g] = V::add(sum[g], e);
    }
  for (int g = 0; g < GC; ++g) l[g] = l[g] * correction[g] + (CHUNK_RELATIVE ? weight[g] : 1.0f) * V::reduce_add(sum[g]);
  for (int g = 0; g < GC; ++g)
    if (correction[g] != 1.0f)
      for (int i = 0; i < dv; i += W) V::store(acc[g] + i, V::mul(V::load(acc[g] + i), V::set1(correction[g])));
}

// attend_softmax_update_with that leaves the probabilities (relative to the new running max) in p.
template <typename V, int GC>
void attend_softmax_update(float (*p)[kAttendChunk], int n, int padded, float* m, float* l, float (*acc)[kAttendMaxDim], int dv) {
  float weight[GC];
  attend_softmax_update_with<V, GC>(p, n, padded, m, l, acc, dv, weight,
                                    [&](int g, int j, typename V::type e) { V::store(p[g] + j, e); });
}

// The heads' outputs (acc / l) and, if asked for, their softmax states.
template <int GC>
void attend_finish(const AttendArgs& a, int g0, const float (*acc)[kAttendMaxDim], const float* m, const float* l) {
  for (int g = 0; g < GC; ++g) {
    const float inv = 1.0f / l[g];
    for (int i = 0; i < a.dv; ++i) a.out[(g0 + g) * a.dv + i] = acc[g][i] * inv;
    if (a.softmax_state) a.softmax_state[2 * (g0 + g)] = m[g], a.softmax_state[2 * (g0 + g) + 1] = l[g];
  }
}

// acc[g][i .. i + S * W) += sum over the chunk's n keys of p[g][j] * key j's values (S slices of W lanes,
// each from load(j, s)); attend_values: V row j from column vi.
template <typename V, int GC, int S, typename LoadValues>
[[gnu::always_inline]] inline void attend_values_with(const float (*p)[kAttendChunk], int n, int i, float (*acc)[kAttendMaxDim], LoadValues load) {
  using vec = typename V::type;
  vec o[GC][S];
  for (int g = 0; g < GC; ++g)
    for (int s = 0; s < S; ++s) o[g][s] = V::load(acc[g] + i + s * V::W);
  for (int j = 0; j < n; ++j) {
    vec v[S];
    // Unrolled, or GCC 12 may keep v[] on the stack (the decoding kernels' values 15-20% slower).
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) v[s] = load(j, s);  // key j's slice s
#pragma GCC unroll 8
    for (int g = 0; g < GC; ++g) {
      const vec pj = V::set1(p[g][j]);
#pragma GCC unroll 8
      for (int s = 0; s < S; ++s) o[g][s] = V::fma(pj, v[s], o[g][s]);
    }
  }
  for (int g = 0; g < GC; ++g)
    for (int s = 0; s < S; ++s) V::store(acc[g] + i + s * V::W, o[g][s]);
}

template <typename V, typename T, int GC, int S>
void attend_values(const float (*p)[kAttendChunk], const T* const* vrow, int n, int vi, int i, float (*acc)[kAttendMaxDim]) {
  attend_values_with<V, GC, S>(p, n, i, acc, [&](int j, int s) { return V::load(vrow[j] + vi + s * V::W); });
}

// acc[g][i .. dv) += sum over the chunk's n keys of p[g][j] * V row j, for the value lanes past the last
// whole vector (fewer than W). Exactly half a vector (8-wide heads on AVX-512), where the vector type has
// load2 and set2: two keys per vector, key j's lanes in the low half and key j + 1's in the high one, the
// halves added at the end. Otherwise each key's lanes are widened into a zero-padded row of W floats, and
// those rows accumulate as whole vectors (lanes past dv are never read out).
template <typename V, typename T, int GC>
void attend_values_tail(const float (*p)[kAttendChunk], const T* const* vrow, int n, int i, int dv, float (*acc)[kAttendMaxDim]) {
  constexpr int W = V::W;
  if constexpr (requires(const T* r, float x) { V::load2(r, r); V::set2(x, x); }) {
    if (2 * (dv - i) == W) {
      using vec = typename V::type;
      vec o[GC];
      for (int g = 0; g < GC; ++g) o[g] = V::zero();
      for (int j = 0; j < n; j += 2) {
        // With n odd the last pair's second key is past the chunk: probability 0, key j's row read again.
        const vec v = V::load2(vrow[j] + i, (j + 1 < n ? vrow[j + 1] : vrow[j]) + i);
        for (int g = 0; g < GC; ++g) o[g] = V::fma(V::set2(p[g][j], j + 1 < n ? p[g][j + 1] : 0.0f), v, o[g]);
      }
      alignas(64) float halves[W];  // [2][W / 2] even keys' sums, odd keys' sums
      for (int g = 0; g < GC; ++g) {
        V::store(halves, o[g]);
        for (int lane = 0; lane < W / 2; ++lane) acc[g][i + lane] += halves[lane] + halves[W / 2 + lane];
      }
      return;
    }
  }
  alignas(64) float rows[kAttendChunk][W];  // [chunk keys][W] the tail lanes of each V row
  const float* row_ptr[kAttendChunk];
  T padded[W] = {};  // one row's tail lanes, then zeros, widened with one vector load
  for (int j = 0; j < n; ++j) {
    for (int lane = 0; lane < dv - i; ++lane) padded[lane] = vrow[j][i + lane];
    V::store(rows[j], V::load(padded));
    row_ptr[j] = rows[j];
  }
  attend_values<V, float, GC, 1>(p, row_ptr, n, 0, i, acc);
}

// The scores of one tile of NV vectors of W keys on float pages ([d][bs] transposed K of element type T;
// kparts[c]: vector c's SPLIT parts, each where its first key lies in its page) for GC heads, into
// p[g][column + c * W]: one vector op per dimension covers a vector's keys for one head.
template <typename V, typename T, int GC, int NV, int SPLIT>
[[gnu::always_inline]] inline void attend_float_scores(const float (*q)[kAttendMaxDim], const T* const (*kparts)[SPLIT], int bs,
                                                       int d, float (*p)[kAttendChunk], int column, PageStreamPrefetch& ahead) {
  using vec = typename V::type;
  vec s[GC][NV];
  for (int g = 0; g < GC; ++g)
    for (int c = 0; c < NV; ++c) s[g][c] = V::zero();
  for (int i = 0; i < d; ++i) {
    ahead.step();
    vec k[NV];
    for (int c = 0; c < NV; ++c) k[c] = attend_load_keys<V, T, SPLIT>(kparts[c], static_cast<size_t>(i) * bs);
    for (int g = 0; g < GC; ++g) {
      const vec qi = V::set1(q[g][i]);
      for (int c = 0; c < NV; ++c) s[g][c] = V::fma(qi, k[c], s[g][c]);
    }
  }
  for (int g = 0; g < GC; ++g)
    for (int c = 0; c < NV; ++c) V::store(p[g] + column + c * V::W, s[g][c]);
}

// GC query heads starting at g0 of the group (GC a compile-time count so score tiles stay in registers).
// V is the including file's vector type: V::W lanes, V::kMaxGroup heads per pass, V::kTileKeys keys scored
// per tile (a multiple of 16 and of W), V::kValueSlices value slices per accumulation pass, and zero, set1,
// load(float*), load(uint16_t*) (fp16 bits), store, add, sub, mul, fma(a, b, c) = a * b + c, max,
// reduce_max, reduce_add, exp (for arguments <= 0), and for pages smaller than W, load2 / load4.
// SPLIT: pages per vector (W / block_size when pages are smaller than a vector, else 1).
// Keys are taken kAttendChunk at a time: the chunk's scores are computed tile by tile into a small buffer,
// one softmax update covers the whole chunk (one max, one rescale of the accumulators), then its values are
// accumulated with the heads' accumulators held in registers across the chunk's tiles.
template <typename V, typename T, int GC, int SPLIT>
void attend_chunk(const AttendArgs& a, int g0) {
  constexpr int B = V::kTileKeys, CK = kAttendChunk, W = V::W, NV = B / W;  // vectors per tile of B keys
  constexpr int PART = W / SPLIT;  // keys of one vector that lie in one page
  constexpr int VS = V::kValueSlices;
  static_assert(B % kAttendTile == 0 && CK % B == 0, "tiles are whole 16-key steps and fill a chunk");
  const int d = a.d, dv = a.dv, bs = a.block_size;
  const int page_keys = bs < kAttendTile ? bs : kAttendTile;  // keys of a 16-key step in one page
  alignas(64) float q[GC][kAttendMaxDim];
  alignas(64) float acc[GC][kAttendMaxDim];
  alignas(64) float p[GC][CK];  // scores, then probabilities, of the current chunk
  float m[GC], l[GC];
  for (int g = 0; g < GC; ++g) {
    for (int i = 0; i < d; ++i) q[g][i] = a.q[(g0 + g) * d + i] * a.scale;
    for (int i = 0; i < (dv + W - 1) / W * W; ++i) acc[g][i] = 0.0f;  // lanes past dv too (a tail's vector)
    m[g] = -3.0e38f;
    l[g] = 0.0f;
  }
  const T* kbase = static_cast<const T*>(a.k);
  const T* vbase = static_cast<const T*>(a.v);
  const T* vrow[CK];  // [chunk keys] each key's V row
  // Stepped once per dimension of the scores: d steps per tile of B keys. While the first tile is scored
  // (its own pages come cold), all the pages up to the prefetch distance are requested; without that
  // burst every item's first tiles came cold (-10 to -17% per layer at 512 cached tokens).
  const size_t key_bytes = sizeof(T) * (d + a.v_stride);
  const int rate = attend_stream_rate(key_bytes, B, d), burst = attend_stream_rate(key_bytes, kAttendPrefetchKeys, d);
  PageStreamPrefetch ahead(a, sizeof(T) * bs * d, sizeof(T) * bs * a.v_stride, kAttendPrefetchKeys, burst, rate);
  for (int chunk = 0; chunk < a.n_keys; chunk += CK) {
    const int n = a.n_keys - chunk < CK ? a.n_keys - chunk : CK;
    const int tiles = (n + B - 1) / B;
    for (int t = 0; t < tiles; ++t) {
      const int start = chunk + t * B;
      // Where each part of each vector of the tile starts ([d][bs] K pages), and each key's V row.
      const T* kparts[NV][SPLIT];
      for (int c = 0; c < NV; ++c)
        for (int s = 0; s < SPLIT; ++s) {
          // First key of this part; parts past the end read the tile's first page instead (their scores are
          // masked), so no page beyond the sequence's block table is looked up.
          const int pos = start + c * W + s * PART < a.n_keys ? start + c * W + s * PART : start;
          const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
          kparts[c][s] = kbase + page * bs * d + pos % bs;
        }
      for (int j = 0; j < B; j += page_keys) {
        const int pos = start + j;
        if (pos >= a.n_keys) break;
        const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
        const T* v0 = vbase + (page * bs + pos % bs) * a.v_stride;
        for (int r = 0; r < page_keys; ++r) vrow[t * B + j + r] = v0 + static_cast<size_t>(r) * a.v_stride;
      }
      ahead.advance_to(start);
      attend_float_scores<V, T, GC, NV, SPLIT>(q, kparts, bs, d, p, t * B, ahead);
    }
    attend_softmax_update<V, GC>(p, n, tiles * B, m, l, acc, dv);
    // Values: per VS W-wide slices of the value width, the heads' accumulators stay in registers for the
    // chunk (VS slices give GC * VS independent accumulation chains to hide the FMA latency).
    int i = 0;
    for (; i + VS * W <= dv; i += VS * W) attend_values<V, T, GC, VS>(p, vrow, n, i, i, acc);
    for (; i + W <= dv; i += W) attend_values<V, T, GC, 1>(p, vrow, n, i, i, acc);
    if (i < dv) attend_values_tail<V, T, GC>(p, vrow, n, i, dv, acc);
  }
  attend_finish<GC>(a, g0, acc, m, l);
}

template <typename V, typename T, int SPLIT>
void attend_split(const AttendArgs& a) {
  constexpr int C = V::kMaxGroup;  // heads per pass, bounded by the register file
  for (int g0 = 0; g0 < a.G; g0 += C) {
    switch (a.G - g0 < C ? a.G - g0 : C) {
      case 1: attend_chunk<V, T, 1, SPLIT>(a, g0); break;
      case 2: attend_chunk<V, T, (C >= 2 ? 2 : 1), SPLIT>(a, g0); break;
      case 3: attend_chunk<V, T, (C >= 3 ? 3 : 1), SPLIT>(a, g0); break;
      case 4: attend_chunk<V, T, (C >= 4 ? 4 : 1), SPLIT>(a, g0); break;
      case 5: attend_chunk<V, T, (C >= 5 ? 5 : 1), SPLIT>(a, g0); break;
      case 6: attend_chunk<V, T, (C >= 6 ? 6 : 1), SPLIT>(a, g0); break;
      case 7: attend_chunk<V, T, (C >= 7 ? 7 : 1), SPLIT>(a, g0); break;
      default: attend_chunk<V, T, (C >= 8 ? 8 : 1), SPLIT>(a, g0); break;
    }
  }
}

template <typename V, typename T>
void attend(const AttendArgs& a) {
  if constexpr (V::W >= 16) {
    if (a.block_size == 4) return attend_split<V, T, V::W / 4>(a);
  }
  if constexpr (V::W >= 8) {
    if (a.block_size < V::W) return attend_split<V, T, 2>(a);  // 8-key pages of 16 lanes, 4-key pages of 8
  }
  attend_split<V, T, 1>(a);
}

}  // namespace

using AttendFn = void (*)(const AttendArgs& a);
// Per ISA: the kernel for F32 (f16 == false) or F16 pages.
AttendFn attend_kernel_baseline(bool f16);
AttendFn attend_kernel_avx2(bool f16);
AttendFn attend_kernel_avx512(bool f16);
AttendFn attend_kernel_neon(bool f16);
// BF16 pages (pair-interleaved K and V, see KvLayerView), with vdpbf16ps; nullptr without AVX-512 BF16.
AttendFn attend_kernel_bf16_avx512();

}  // namespace kestrel
