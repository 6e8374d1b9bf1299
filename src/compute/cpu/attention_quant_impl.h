// Paged attention over quantized KV pages (q8_0, q4_0, fp8, tq4, tq3; layouts in compute/kv_layer_view.h),
// dequantizing in registers inside the tile loop: the same tiles, chunks and online softmax as
// attention_impl.h's float kernel (include that first), head widths a multiple of 32 (one fp16 scale per 32
// values) and pages of a multiple of 16 tokens. Each chunk of keys runs K's score stage, then V's value
// stage (attend_score_chunk, attend_value_chunk, one per page type), so K and V may differ in type: any
// two quantized types, or a quantized type beside F32 / F16 pages (llama.cpp's common `-ctk q8_0` with F16 V).
//   Scores (q8_0: integer dot products, see attend_q8_scores; the others:) per dimension, a vector of W
//   keys' codes is widened and decoded (int8 or nibble to float, fp8
//   through its fp16 bit pattern, codebook indices through a register permute) and multiplied by the keys'
//   scale for that 32-dimension group; the group of G query heads then shares it, so decoding costs 1/G of
//   the FMAs. Rotated types expect the query already rotated (attention.cpp does it once per head).
//   Values: a key's scale is folded into its probability once per 32-value group (p'[j] = p[j] * s[j]),
//   and each key's codes are decoded once for all G heads (q8_0: 16-bit dot products, attend_q8_values).
// The vector type V adds to attention_impl.h's interface an integer lane type and: widen_u8 (W bytes to
// W lanes), widen_i8 (W signed bytes to floats), srl / shl (by a count), srlv (by per-lane counts), and_i,
// or_i, add_i, sub_i, set1_i, iota (lane numbers), to_float (signed), fp8 (E4M3 bits in each lane to the
// value / 256), lut_type / make_lut / lookup (a 16-entry float table indexed per lane), load_i8x4 (W lanes
// of four signed bytes) and dot4(acc, k, q4) = acc + per lane the dot product of its four bytes with q4's,
// plus kDotOffset times the sum of q4's bytes (dpbusd reads k as unsigned: k + 128), load_i8x2 (W lanes
// of two signed bytes widened to int16) and dot2(acc, v, p2) = acc + per lane the dot product of its two
// int16 with p2's.
#pragma once
#include <cstring>
#include <type_traits>

#include "compute/kv_quant.h"

namespace kestrel {

constexpr int kQuantGroup = 32;  // values per scale in the fast path (kKvGroup)
// At most how many lines of pages are prefetched per step of a streaming loop (scores and values step).
constexpr int kQuantPrefetchLinesPerStep = 2;

namespace {

// W keys' values of dimension i: codes at `codes` (the page's code planes offset by the first key),
// bs-byte planes, d dimensions per key.
template <typename V, KvType Q>
typename V::type attend_decode_keys(const uint8_t* codes, int i, int bs, int d, const typename V::lut_type& lut) {
  if constexpr (Q == KvType::FP8) {
    return V::fp8(V::widen_u8(codes + static_cast<size_t>(i) * bs));
  } else if constexpr (Q == KvType::Q4_0 || Q == KvType::TQ4) {
    const auto c = V::and_i(V::srl(V::widen_u8(codes + static_cast<size_t>(i / 2) * bs), 4 * (i & 1)), 15);
    if constexpr (Q == KvType::Q4_0) return V::sub(V::to_float(c), V::set1(8.0f));
    else return V::lookup(lut, c);
  } else {  // tq3: low two bits from the 2-bit plane, the high bit from the 1-bit plane after it
    const auto lo = V::and_i(V::srl(V::widen_u8(codes + static_cast<size_t>(i / 4) * bs), 2 * (i & 3)), 3);
    const auto hi = V::and_i(V::srl(V::widen_u8(codes + static_cast<size_t>(d / 4 + i / 8) * bs), i & 7), 1);
    return V::lookup(lut, V::or_i(lo, V::shl(hi, 2)));
  }
}

inline uint32_t attend_load_u32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// Values [slice * W, slice * W + W) of one key's 32-value group whose codes start at `group`.
template <typename V, KvType Q>
typename V::type attend_decode_values(const uint8_t* group, int slice, const typename V::lut_type& lut) {
  constexpr int W = V::W;
  const int x0 = slice * W;
  if constexpr (Q == KvType::FP8) {
    return V::fp8(V::widen_u8(group + x0));
  } else if constexpr (Q == KvType::Q4_0 || Q == KvType::TQ4) {  // byte b: value b low, value b + 16 high
    const auto c = x0 < kQuantGroup / 2 ? V::and_i(V::widen_u8(group + x0), 15) : V::srl(V::widen_u8(group + x0 - kQuantGroup / 2), 4);
    if constexpr (Q == KvType::Q4_0) return V::sub(V::to_float(c), V::set1(8.0f));
    else return V::lookup(lut, c);
  } else {  // tq3: value x's low bits at bit 2x of the first 8 bytes, its high bit at bit x of the next 4
    const auto lanes = V::iota();
    const int lo_bit = 2 * x0, hi_bit = x0;
    const auto lo = V::and_i(V::srlv(V::set1_i(attend_load_u32(group + lo_bit / 8)),
                                     V::add_i(V::set1_i(lo_bit % 8), V::shl(lanes, 1))), 3);
    const auto hi = V::and_i(V::srlv(V::set1_i(attend_load_u32(group + kQuantGroup / 4 + hi_bit / 8)),
                                     V::add_i(V::set1_i(hi_bit % 8), lanes)), 1);
    return V::lookup(lut, V::or_i(lo, V::shl(hi, 2)));
  }
}

// q8_0 keys score with integer dot products: each query head is quantized to int8 per 32 dimensions
// (scale max|q| / 127), four dimensions of W keys meet four query bytes in one V::dot4, and each group's
// integer sum is scaled by the key's and the query's scales.
template <int GC>
struct QuantizedQueries {
  int32_t q4[GC][kAttendMaxDim / 4];   // four int8 per word
  float scale[GC][kAttendMaxDim / 32];
  int32_t offset[GC][kAttendMaxDim / 32];  // V::kDotOffset times the group's sum of q bytes

  template <typename V>
  void quantize(const float (*q)[kAttendMaxDim], int d) {
    for (int g = 0; g < GC; ++g)
      for (int group = 0; group < d / 32; ++group) {
        typename V::type vmax = V::zero();  // max |q| lane by lane
        for (int i = group * 32; i < group * 32 + 32; i += V::W) {
          const auto x = V::load(q[g] + i);
          vmax = V::max(vmax, V::max(x, V::sub(V::zero(), x)));
        }
        const float amax = V::reduce_max(vmax);
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[g][group] = amax / 127.0f;
        int32_t sum = 0;
        for (int i4 = group * 8; i4 < group * 8 + 8; ++i4) {
          uint32_t word = 0;
          for (int b = 0; b < 4; ++b) {
            const float x = q[g][i4 * 4 + b] * inv;
            const int32_t code = static_cast<int32_t>(x + (x >= 0.0f ? 0.5f : -0.5f));  // round half away
            sum += code;
            word |= static_cast<uint32_t>(code & 0xFF) << (8 * b);
          }
          q4[g][i4] = static_cast<int32_t>(word);
        }
        offset[g][group] = V::kDotOffset * sum;
      }
  }
};

// Scores of NV vectors of W keys (codes[c]: their page's code planes offset by 4 bytes per key; scales[c]:
// their fp16 scales) for GC heads, into p[g][column + c * W]: each query broadcast serves every vector.
template <typename V, int GC, int NV>
[[gnu::always_inline]] inline void attend_q8_scores(const QuantizedQueries<GC>& qq, const uint8_t* const* codes, const uint16_t* const* scales, int bs,
                      int d, float (*p)[kAttendChunk], int column, PageStreamPrefetch& ahead) {
  using vec = typename V::type;
  using ivec = typename V::itype;
  constexpr int W = V::W;
  for (int group = 0; group < d / 32; ++group) {
    ivec acc[GC][NV];
    for (int g = 0; g < GC; ++g)
      for (int c = 0; c < NV; ++c) acc[g][c] = V::set1_i(0);
    for (int i4 = group * 8; i4 < group * 8 + 8; ++i4) {
      ahead.step();
      ivec k4[NV];
      for (int c = 0; c < NV; ++c) k4[c] = V::load_i8x4(codes[c] + static_cast<size_t>(i4) * bs * 4);
      for (int g = 0; g < GC; ++g)
        for (int c = 0; c < NV; ++c) acc[g][c] = V::dot4(acc[g][c], k4[c], qq.q4[g][i4]);
    }
    for (int c = 0; c < NV; ++c) {
      const vec ks = V::load(scales[c] + static_cast<size_t>(group) * bs);
      for (int g = 0; g < GC; ++g) {
        float* out = p[g] + column + c * W;
        const vec sum = V::to_float(V::sub_i(acc[g][c], V::set1_i(static_cast<uint32_t>(qq.offset[g][group]))));
        const vec scale = V::mul(ks, V::set1(qq.scale[g][group]));
        V::store(out, group == 0 ? V::mul(sum, scale) : V::fma(sum, scale, V::load(out)));
      }
    }
  }
}

// sc[j]: the scales of value group `group` of the chunk's keys [j * W, j * W + W), for `steps` 16-key steps
// (vscales[st]: the V scales of step st's first key, group 0). A probability times its key's scale is what
// meets the key's codes.
template <typename V>
void attend_value_scales(const uint16_t* const* vscales, int bs, int steps, int group, typename V::type* sc) {
  constexpr int STEP_VECS = kAttendTile / V::W;
  for (int st = 0; st < steps; ++st)
    for (int w = 0; w < STEP_VECS; ++w) sc[st * STEP_VECS + w] = V::load(vscales[st] + static_cast<size_t>(group) * bs + w * V::W);
}

// The generic scores of one tile (NV vectors of W keys; kpage[c] + kkey[c]: vector c's page and first key)
// for GC heads, into p[g][column + c * W]: per dimension the keys' codes are decoded and scaled once and every
// head's query value meets them. Always inlined: as its own function GCC 12 left it 4% slower (q4_0).
template <typename V, KvType Q, int GC, int NV>
[[gnu::always_inline]] inline void attend_decoded_scores(const float (*q)[kAttendMaxDim], const uint8_t* const* kpage,
                                                         const int* kkey, size_t k_codes, int bs, int d,
                                                         const typename V::lut_type& lut, float (*p)[kAttendChunk],
                                                         int column, PageStreamPrefetch& ahead) {
  using vec = typename V::type;
  constexpr int W = V::W;
  vec s[GC][NV];
  for (int g = 0; g < GC; ++g)
    for (int c = 0; c < NV; ++c) s[g][c] = V::zero();
  for (int group = 0; group < d / kQuantGroup; ++group) {
    vec kscale[NV];
    for (int c = 0; c < NV; ++c)
      kscale[c] = V::load(reinterpret_cast<const uint16_t*>(kpage[c] + k_codes) + static_cast<size_t>(group) * bs + kkey[c]);
    for (int i = group * kQuantGroup; i < group * kQuantGroup + kQuantGroup; ++i) {
      ahead.step();
      vec k[NV];
      for (int c = 0; c < NV; ++c) k[c] = V::mul(attend_decode_keys<V, Q>(kpage[c] + kkey[c], i, bs, d, lut), kscale[c]);
      for (int g = 0; g < GC; ++g) {
        const vec qi = V::set1(q[g][i]);
        for (int c = 0; c < NV; ++c) s[g][c] = V::fma(qi, k[c], s[g][c]);
      }
    }
  }
  for (int g = 0; g < GC; ++g)
    for (int c = 0; c < NV; ++c) V::store(p[g] + column + c * W, s[g][c]);
}

// q8_0: one chunk's online-softmax update fused with rounding its probabilities for the value products.
// Per head, the probabilities are taken relative to the chunk's own max (the largest is 1) and, per 32-value
// group, times each key's value scale over the chunk's largest scale in that group, rounded to int16
// (at most 32767; far below the codes' own error, and a chunk's small probabilities keep their precision):
// pq[group][g], two keys per word (a pair's codes are side by side in the page). What one unit of pq is
// worth, exp(chunk max - running max) * largest scale / 32767, goes to pscale[group][g]; l[g] gains the
// chunk's sum and acc[g] is rescaled to the new running max m[g]. p: the chunk's scores (n keys, `padded`
// with masked ones); vscales: attend_value_scales's.
template <typename V, int GC>
[[gnu::always_inline]] inline void attend_q8_softmax(float (*p)[kAttendChunk], int n, int padded, const uint16_t* const* vscales, int bs, int groups,
                       float* m, float* l, float (*acc)[kAttendMaxDim], int dv, int32_t (*pq)[GC][kAttendChunk / 2],
                       float (*pscale)[GC]) {
  using vec = typename V::type;
  constexpr int W = V::W;
  const int vecs = padded / W, steps = (n + kAttendTile - 1) / kAttendTile;
  alignas(64) float scaled[kAttendMaxDim / kQuantGroup][kAttendChunk];  // [groups][keys] scale * 32767 / max; 0 past n
  float scale_max[kAttendMaxDim / kQuantGroup];
  for (int group = 0; group < groups; ++group) {
    vec sc[kAttendChunk / W];
    attend_value_scales<V>(vscales, bs, steps, group, sc);
    if (n % W != 0) {  // the lanes past n of the last vector with keys
      alignas(64) float lanes[W];
      V::store(lanes, sc[n / W]);
      for (int lane = n % W; lane < W; ++lane) lanes[lane] = 0.0f;
      sc[n / W] = V::load(lanes);
    }
    for (int j = (n + W - 1) / W; j < vecs; ++j) sc[j] = V::zero();
    vec mx = V::zero();
    for (int j = 0; j < vecs; ++j) mx = V::max(mx, sc[j]);
    scale_max[group] = V::reduce_max(mx);
    const vec to_int = V::set1(scale_max[group] > 0.0f ? 32767.0f / scale_max[group] : 0.0f);
    for (int j = 0; j < vecs; ++j) V::store(scaled[group] + j * W, V::mul(sc[j], to_int));
  }
  float chunk_weight[GC];
  attend_softmax_update_with<V, GC, true>(p, n, padded, m, l, acc, dv, chunk_weight, [&](int g, int j, vec e) {
    for (int group = 0; group < groups; ++group)
      V::store_int16(reinterpret_cast<int16_t*>(pq[group][g]) + j, V::round_to_int(V::mul(e, V::load(scaled[group] + j))));
  });
  for (int g = 0; g < GC; ++g)
    for (int group = 0; group < groups; ++group) pscale[group][g] = chunk_weight[g] * scale_max[group] / 32767.0f;
}

// q8_0 values of one 32-value group: each pair of keys' codes (vpairs[jp]: pair jp's) meets the pair's rounded
// probabilities (attend_q8_softmax's pq and pscale for the group) in one 16-bit dot product (V::dot2) for W
// values at once.
template <typename V, int GC, int S>
[[gnu::always_inline]] inline void attend_q8_values(const int32_t (*pq)[kAttendChunk / 2], const float* pscale, int n, const uint8_t* const* vpairs,
                      int group, float (*acc)[kAttendMaxDim], PageStreamPrefetch& ahead) {
  using ivec = typename V::itype;
  constexpr int W = V::W, SLICES = kQuantGroup / W;
  for (int s0 = 0; s0 < SLICES; s0 += S) {
    ivec sums[GC][S];
    for (int g = 0; g < GC; ++g)
      for (int s = 0; s < S; ++s) sums[g][s] = V::set1_i(0);
    const size_t column = static_cast<size_t>(group) * kQuantGroup + static_cast<size_t>(s0) * W;
    for (int jp = 0; jp < (n + 1) / 2; ++jp) {
      ahead.step();
      ivec v2[S];
      const uint8_t* codes = vpairs[jp] + 2 * column;  // the slices at fixed displacements from it
      for (int s = 0; s < S; ++s) v2[s] = V::load_i8x2(codes + 2 * s * W);
      for (int g = 0; g < GC; ++g)
        for (int s = 0; s < S; ++s) sums[g][s] = V::dot2(sums[g][s], v2[s], pq[g][jp]);
    }
    for (int g = 0; g < GC; ++g)
      for (int s = 0; s < S; ++s) {
        float* out = acc[g] + column + s * W;
        V::store(out, V::fma(V::to_float(sums[g][s]), V::set1(pscale[g]), V::load(out)));
      }
  }
}

// Vectors of a 32-value group's values accumulated per pass (the value loops' slices S).
template <typename V>
constexpr int attend_quant_value_slices() {
  constexpr int slices = kQuantGroup / V::W;
  return V::kValueSlices < slices ? V::kValueSlices : slices;
}

// Page types the kernels below read: every quantized type, and F32 / F16 for one side of a mixed pair
// (uniform float pages take attention_impl.h's kernel; BF16's pair-interleaved pages take their own).
constexpr bool attend_float_page(KvType t) { return t == KvType::F32 || t == KvType::F16; }
constexpr bool attend_quantized_page(KvType t) { return t >= KvType::Q8_0; }

// One pass's state: GC query heads of one (token, KV head) item, carried from chunk to chunk between the
// score stage (K's type) and the value stage (V's type).
template <int GC>
struct AttendHeads {
  alignas(64) float q[GC][kAttendMaxDim];    // [GC][d] scaled queries (rotated by the caller for rotated K)
  alignas(64) float acc[GC][kAttendMaxDim];  // [GC][dv] value sums relative to m
  alignas(64) float p[GC][kAttendChunk];     // [GC][chunk keys] scores, then probabilities
  float m[GC], l[GC];                        // per head: running max, sum of exp(score - m)
  QuantizedQueries<GC> qq;                   // q as int8 per 32 dimensions (q8_0 keys only)
};

// The score stage of one chunk (keys [chunk, chunk + n)) on K pages of type Q: h.p[g][0, n) gets the scores,
// tile by tile (V::kTileKeys keys; lanes past n score a valid key and are masked by the value stage).
template <typename V, KvType Q, int GC>
[[gnu::always_inline]] inline void attend_score_chunk(const AttendArgs& a, AttendHeads<GC>& h, int chunk, int n, PageStreamPrefetch& stream) {
  PageStreamPrefetch ahead = stream;  // a local copy: its counters stay in registers in the loops
  constexpr int B = V::kTileKeys, W = V::W, NV = B / W;
  const int d = a.d, bs = a.block_size;
  const size_t k_codes = attend_quantized_page(Q) ? static_cast<size_t>(bs) * kv_code_bytes(Q, d) : 0;  // bytes of a page's codes
  const size_t k_page = static_cast<size_t>(bs) * kv_row_bytes(Q, d);
  const auto* kbase = static_cast<const uint8_t*>(a.k);
  [[maybe_unused]] const typename V::lut_type lut = V::make_lut(kv_codebook(Q));  // tq4 / tq3 codes' levels
  for (int t = 0; t * B < n; ++t) {
    const int start = chunk + t * B;
    const uint8_t* kpage[NV];  // each vector's page
    int kkey[NV];              // the vector's first key's index in it
    for (int c = 0; c < NV; ++c) {
      const int pos = start + c * W < a.n_keys ? start + c * W : start;  // past the end: masked
      const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
      kkey[c] = pos % bs;
      kpage[c] = kbase + page * k_page;
    }
    ahead.advance_to(start);
    if constexpr (Q == KvType::Q8_0) {
      const uint8_t* codes[NV];
      const uint16_t* scales[NV];
      for (int c = 0; c < NV; ++c) {
        codes[c] = kpage[c] + static_cast<size_t>(kkey[c]) * 4;
        scales[c] = reinterpret_cast<const uint16_t*>(kpage[c] + k_codes) + kkey[c];
      }
      attend_q8_scores<V, GC, NV>(h.qq, codes, scales, bs, d, h.p, t * B, ahead);
    } else if constexpr (attend_quantized_page(Q)) {
      attend_decoded_scores<V, Q, GC, NV>(h.q, kpage, kkey, k_codes, bs, d, lut, h.p, t * B, ahead);
    } else {
      using T = std::conditional_t<Q == KvType::F16, uint16_t, float>;
      const T* kparts[NV][1];
      for (int c = 0; c < NV; ++c) kparts[c][0] = reinterpret_cast<const T*>(kpage[c]) + kkey[c];
      attend_float_scores<V, T, GC, NV, 1>(h.q, kparts, bs, d, h.p, t * B, ahead);
    }
  }
  stream = ahead;
}

// The value stage of one chunk on V pages of type Q: the online-softmax update of the chunk's scores h.p, and
// the chunk's values accumulated into h.acc for every head.
template <typename V, KvType Q, int GC>
[[gnu::always_inline]] inline void attend_value_chunk(const AttendArgs& a, AttendHeads<GC>& h, int chunk, int n, PageStreamPrefetch& stream) {
  PageStreamPrefetch ahead = stream;  // a local copy: its counters stay in registers in the loops
  constexpr int B = V::kTileKeys, CK = kAttendChunk, W = V::W, G32 = kQuantGroup;
  constexpr int SLICES = G32 / W;  // vectors per 32-value group
  constexpr int VS = attend_quant_value_slices<V>();
  static_assert(B % kAttendTile == 0 && CK % B == 0 && SLICES % VS == 0, "tiles fill chunks, slices fill groups");
  constexpr bool kQ8 = Q == KvType::Q8_0;
  constexpr int kCodeKeys = kQ8 ? 2 : 1;  // keys per V code row: q8_0 pages hold pairs of keys
  const int dv = a.dv, bs = a.block_size;
  const int padded = (n + B - 1) / B * B;
  const auto* vbase = static_cast<const uint8_t*>(a.v);
  if constexpr (attend_float_page(Q)) {
    using T = std::conditional_t<Q == KvType::F16, uint16_t, float>;
    const T* vrow[CK];  // [chunk keys] each key's V row
    for (int j = 0; j < n; j += kAttendTile) {
      const int pos = chunk + j;
      const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
      const T* v0 = reinterpret_cast<const T*>(vbase) + (page * bs + pos % bs) * a.v_stride;
      for (int r = 0; r < kAttendTile; ++r) vrow[j + r] = v0 + static_cast<size_t>(r) * a.v_stride;
    }
    attend_softmax_update<V, GC>(h.p, n, padded, h.m, h.l, h.acc, dv);
    constexpr int FS = V::kValueSlices;
    int i = 0;
    for (; i + FS * W <= dv; i += FS * W)
      attend_values_with<V, GC, FS>(h.p, n, i, h.acc, [&](int j, int s) {
        if (s == 0) ahead.step();
        return V::load(vrow[j] + i + s * W);
      });
    for (; i < dv; i += W)  // dv is a multiple of 32, so of W
      attend_values_with<V, GC, 1>(h.p, n, i, h.acc, [&](int j, int) {
        ahead.step();
        return V::load(vrow[j] + i);
      });
  } else {
    const int steps = (n + kAttendTile - 1) / kAttendTile;
    const size_t v_row = kv_code_bytes(Q, dv), v_codes = static_cast<size_t>(bs) * v_row;
    const size_t v_page = static_cast<size_t>(bs) * kv_row_bytes(Q, dv);
    const uint8_t* vcodes[CK / kCodeKeys];      // [chunk keys / kCodeKeys] each code row's V codes
    const uint16_t* vscales[CK / kAttendTile];  // [16-key steps] scales of the step's first key, group 0
    for (int j = 0; j < n; j += kAttendTile) {
      const int pos = chunk + j;
      const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
      const uint8_t* v0 = vbase + page * v_page;
      vscales[j / kAttendTile] = reinterpret_cast<const uint16_t*>(v0 + v_codes) + pos % bs;
      for (int r = 0; r < kAttendTile; r += kCodeKeys)  // a q8_0 pair starts where its first key's row would
        vcodes[(j + r) / kCodeKeys] = v0 + static_cast<size_t>(pos % bs + r) * v_row;
    }
    if constexpr (kQ8) {
      alignas(64) int32_t pq[kAttendMaxDim / G32][GC][CK / 2];  // [value groups][heads][key pairs] (attend_q8_softmax)
      float pscale[kAttendMaxDim / G32][GC];
      attend_q8_softmax<V, GC>(h.p, n, padded, vscales, bs, dv / G32, h.m, h.l, h.acc, dv, pq, pscale);
      for (int group = 0; group < dv / G32; ++group) attend_q8_values<V, GC, VS>(pq[group], pscale[group], n, vcodes, group, h.acc, ahead);
    } else {
      const typename V::lut_type lut = V::make_lut(kv_codebook(Q));
      attend_softmax_update<V, GC>(h.p, n, padded, h.m, h.l, h.acc, dv);
      for (int group = 0; group < dv / G32; ++group) {
        typename V::type sc[CK / W];  // [chunk keys / W] the keys' scales of this value group
        attend_value_scales<V>(vscales, bs, steps, group, sc);
        alignas(64) float pv[GC][CK];  // probabilities times the scales
        for (int j = 0; j < steps * kAttendTile; j += W)
          for (int g = 0; g < GC; ++g) V::store(pv[g] + j, V::mul(V::load(h.p[g] + j), sc[j / W]));
        const size_t group_offset = static_cast<size_t>(group) * kv_code_bytes(Q, G32);
        for (int s0 = 0; s0 < SLICES; s0 += VS)  // each key's codes decoded once for the GC heads
          attend_values_with<V, GC, VS>(pv, n, group * G32 + s0 * W, h.acc, [&](int j, int s) {
            if (s == 0) ahead.step();
            return attend_decode_values<V, Q>(vcodes[j] + group_offset, s0 + s, lut);
          });
      }
    }
  }
  stream = ahead;
}

// Steps of a stage's streaming loops (PageStreamPrefetch::step) per chunk of kAttendChunk keys, for the rate
// of the pages' prefetch stream.
template <typename V>
int attend_score_steps(KvType t, int d) {
  return kAttendChunk / V::kTileKeys * (t == KvType::Q8_0 ? d / 4 : d);
}
template <typename V>
int attend_value_steps(KvType t, int dv) {
  constexpr int W = V::W, SLICES = kQuantGroup / W, VS = attend_quant_value_slices<V>();
  if (attend_float_page(t)) return kAttendChunk * (dv / (V::kValueSlices * W) + dv % (V::kValueSlices * W) / W);
  return dv / kQuantGroup * SLICES / VS * (t == KvType::Q8_0 ? kAttendChunk / 2 : kAttendChunk);
}

template <int GC>
using AttendStageFn = void (*)(const AttendArgs& a, AttendHeads<GC>& h, int chunk, int n, PageStreamPrefetch& ahead);

template <typename V, int GC, bool SCORES>
AttendStageFn<GC> attend_stage(KvType t) {
  switch (t) {
#define KESTREL_ATTEND_STAGE(T) \
  case T: return SCORES ? attend_score_chunk<V, T, GC> : attend_value_chunk<V, T, GC>;
    KESTREL_ATTEND_STAGE(KvType::F32)
    KESTREL_ATTEND_STAGE(KvType::F16)
    KESTREL_ATTEND_STAGE(KvType::Q8_0)
    KESTREL_ATTEND_STAGE(KvType::Q4_0)
    KESTREL_ATTEND_STAGE(KvType::FP8)
    KESTREL_ATTEND_STAGE(KvType::TQ4)
    KESTREL_ATTEND_STAGE(KvType::TQ3)
#undef KESTREL_ATTEND_STAGE
    default: return nullptr;
  }
}

// GC query heads starting at g0 of the group over K and V pages of the types a.types (any pair the stages
// read, at least one of them quantized): per chunk of keys, K's score stage then V's value stage
// (run_chunk(h, chunk, n, ahead) runs both).
template <typename V, int GC, typename RunChunk>
[[gnu::always_inline]] inline void attend_pages_pass(const AttendArgs& a, int g0, RunChunk run_chunk) {
  const KvType kt = a.types.k, vt = a.types.v;
  const int d = a.d, dv = a.dv, bs = a.block_size;
  AttendHeads<GC> h;
  for (int g = 0; g < GC; ++g) {
    for (int i = 0; i < d; ++i) h.q[g][i] = a.q[(g0 + g) * d + i] * a.scale;
    for (int i = 0; i < dv; ++i) h.acc[g][i] = 0.0f;
    h.m[g] = -3.0e38f;
    h.l[g] = 0.0f;
  }
  if (kt == KvType::Q8_0) h.qq.template quantize<V>(h.q, d);
  // Quantized pages: a flat kQuantPrefetchLinesPerStep (measured best for them). With float pages on one
  // side, the float kernel's scheme: the pages' rate per step and a burst over the first tile.
  const size_t key_bytes = kv_row_bytes(kt, d) + kv_row_bytes(vt, dv);
  const bool quantized = attend_quantized_page(kt) && attend_quantized_page(vt);
  const int steps = attend_score_steps<V>(kt, d) + attend_value_steps<V>(vt, dv);
  const int rate = quantized ? kQuantPrefetchLinesPerStep : attend_stream_rate(key_bytes, kAttendChunk, steps);
  const int burst = quantized ? kQuantPrefetchLinesPerStep
                              : attend_stream_rate(key_bytes, kAttendPrefetchKeys, attend_score_steps<V>(kt, d) * V::kTileKeys / kAttendChunk);
  PageStreamPrefetch ahead(a, static_cast<size_t>(bs) * kv_row_bytes(kt, d), static_cast<size_t>(bs) * kv_row_bytes(vt, dv),
                           kAttendPrefetchKeys, burst, rate);
  for (int chunk = 0; chunk < a.n_keys; chunk += kAttendChunk)
    run_chunk(h, chunk, a.n_keys - chunk < kAttendChunk ? a.n_keys - chunk : kAttendChunk, ahead);
  attend_finish<GC>(a, g0, h.acc, h.m, h.l);
}

// K and V of one type Q: the stages inlined into one function per type (through pointers, GCC 12 keeps fewer
// of the loops' values in registers: q8_0 7-13% slower, q4_0 on AVX2 12%).
template <typename V, KvType Q, int GC>
void attend_pages_uniform(const AttendArgs& a, int g0) {
  attend_pages_pass<V, GC>(a, g0, [&](AttendHeads<GC>& h, int chunk, int n, PageStreamPrefetch& ahead) {
    attend_score_chunk<V, Q, GC>(a, h, chunk, n, ahead);
    attend_value_chunk<V, Q, GC>(a, h, chunk, n, ahead);
  });
}

// K and V of different types: each stage compiled once per type and called through a pointer, so every pair
// runs on its two types' loops without an instantiation per pair.
template <typename V, int GC>
void attend_pages_mixed(const AttendArgs& a, int g0) {
  const AttendStageFn<GC> scores = attend_stage<V, GC, true>(a.types.k), values = attend_stage<V, GC, false>(a.types.v);
  attend_pages_pass<V, GC>(a, g0, [&](AttendHeads<GC>& h, int chunk, int n, PageStreamPrefetch& ahead) {
    scores(a, h, chunk, n, ahead);
    values(a, h, chunk, n, ahead);
  });
}

template <typename V, int GC>
void attend_pages_heads(const AttendArgs& a, int g0) {
  if (a.types.k != a.types.v) return attend_pages_mixed<V, GC>(a, g0);
  switch (a.types.k) {
    case KvType::Q8_0: return attend_pages_uniform<V, KvType::Q8_0, GC>(a, g0);
    case KvType::Q4_0: return attend_pages_uniform<V, KvType::Q4_0, GC>(a, g0);
    case KvType::FP8: return attend_pages_uniform<V, KvType::FP8, GC>(a, g0);
    case KvType::TQ4: return attend_pages_uniform<V, KvType::TQ4, GC>(a, g0);
    case KvType::TQ3: return attend_pages_uniform<V, KvType::TQ3, GC>(a, g0);
    default: return attend_pages_mixed<V, GC>(a, g0);  // not taken: attend_kernel sends uniform float pages elsewhere
  }
}

template <typename V>
void attend_pages(const AttendArgs& a) {
  constexpr int C = V::kMaxGroup;
  for (int g0 = 0; g0 < a.G; g0 += C) {
    switch (a.G - g0 < C ? a.G - g0 : C) {
      case 1: attend_pages_heads<V, 1>(a, g0); break;
      case 2: attend_pages_heads<V, (C >= 2 ? 2 : 1)>(a, g0); break;
      case 3: attend_pages_heads<V, (C >= 3 ? 3 : 1)>(a, g0); break;
      case 4: attend_pages_heads<V, (C >= 4 ? 4 : 1)>(a, g0); break;
      case 5: attend_pages_heads<V, (C >= 5 ? 5 : 1)>(a, g0); break;
      case 6: attend_pages_heads<V, (C >= 6 ? 6 : 1)>(a, g0); break;
      case 7: attend_pages_heads<V, (C >= 7 ? 7 : 1)>(a, g0); break;
      default: attend_pages_heads<V, (C >= 8 ? 8 : 1)>(a, g0); break;
    }
  }
}

}  // namespace

// Per ISA: the kernel for K and V pages of the types in AttendArgs::types, at least one quantized and each
// quantized, F32 or F16 (attend_quantized_page, attend_float_page); nullptr where the ISA has none.
AttendFn attend_quant_kernel_baseline();
AttendFn attend_quant_kernel_avx2();
AttendFn attend_quant_kernel_avx512();

}  // namespace kestrel
