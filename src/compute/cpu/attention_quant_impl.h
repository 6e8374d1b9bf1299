// Paged attention over quantized KV pages (q8_0, q4_0, fp8, tq4, tq3; layouts in compute/kv_layer_view.h),
// dequantizing in registers inside the tile loop: the same tiles, chunks and online softmax as
// attention_impl.h's float kernel (include that first), for K and V of one quantized type Q, head widths a
// multiple of 32 (one fp16 scale per 32 values) and pages of a multiple of 16 tokens.
//   Scores: per dimension, a vector of W keys' codes is widened and decoded (int8 or nibble to float, fp8
//   through its fp16 bit pattern, codebook indices through a register permute) and multiplied by the keys'
//   scale for that 32-dimension group; the group of G query heads then shares it, so decoding costs 1/G of
//   the FMAs. Rotated types expect the query already rotated (attention.cpp does it once per head).
//   Values: a key's scale is folded into its probability once per 32-value group (p'[j] = p[j] * s[j]),
//   and each key's codes are decoded once for all G heads.
// The vector type V adds to attention_impl.h's interface an integer lane type and: widen_u8 (W bytes to
// W lanes), widen_i8 (W signed bytes to floats), srl / shl (by a count), srlv (by per-lane counts), and_i,
// or_i, add_i, set1_i, iota (lane numbers), to_float, fp8 (E4M3 bits in each lane to the value / 256),
// lut_type / make_lut / lookup (a 16-entry float table indexed per lane).
#pragma once
#include <cstring>

#include "compute/kv_quant.h"

namespace kestrel {

constexpr int kQuantGroup = 32;  // values per scale in the fast path (kKvGroup)

namespace {

// W keys' values of dimension i: codes at `codes` (the page's code planes offset by the first key),
// bs-byte planes, d dimensions per key.
template <typename V, KvType Q>
typename V::type attend_decode_keys(const uint8_t* codes, int i, int bs, int d, const typename V::lut_type& lut) {
  if constexpr (Q == KvType::Q8_0) {
    return V::widen_i8(codes + static_cast<size_t>(i) * bs);
  } else if constexpr (Q == KvType::FP8) {
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
  if constexpr (Q == KvType::Q8_0) {
    return V::widen_i8(group + x0);
  } else if constexpr (Q == KvType::FP8) {
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

// acc[g][group * 32 + slices [s0, s0 + S) * W) += sum over the chunk's n keys of pv[g][j] * the key's
// decoded values (pv: probabilities times the keys' scales for this group).
template <typename V, KvType Q, int GC, int S>
void attend_quant_values(const float (*pv)[kAttendChunk], const uint8_t* const* vcodes, size_t group_offset, int n,
                         int s0, int column, float (*acc)[kAttendMaxDim], const typename V::lut_type& lut) {
  using vec = typename V::type;
  vec o[GC][S];
  for (int g = 0; g < GC; ++g)
    for (int s = 0; s < S; ++s) o[g][s] = V::load(acc[g] + column + s * V::W);
  for (int j = 0; j < n; ++j) {
    vec v[S];
    for (int s = 0; s < S; ++s) v[s] = attend_decode_values<V, Q>(vcodes[j] + group_offset, s0 + s, lut);
    for (int g = 0; g < GC; ++g) {
      const vec pj = V::set1(pv[g][j]);
      for (int s = 0; s < S; ++s) o[g][s] = V::fma(pj, v[s], o[g][s]);
    }
  }
  for (int g = 0; g < GC; ++g)
    for (int s = 0; s < S; ++s) V::store(acc[g] + column + s * V::W, o[g][s]);
}

template <typename V, KvType Q, int GC>
void attend_quant_chunk(const AttendArgs& a, int g0) {
  constexpr int B = V::kTileKeys, CK = kAttendChunk, W = V::W, NV = B / W, G32 = kQuantGroup;
  constexpr int SLICES = G32 / W;  // vectors per 32-value group
  constexpr int VS = V::kValueSlices < SLICES ? V::kValueSlices : SLICES;
  static_assert(B % kAttendTile == 0 && CK % B == 0 && SLICES % VS == 0, "tiles fill chunks, slices fill groups");
  using vec = typename V::type;
  const int d = a.d, dv = a.dv, bs = a.block_size;
  const size_t k_codes = static_cast<size_t>(bs) * kv_code_bytes(Q, d);   // bytes of a K page's codes
  const size_t v_row = kv_code_bytes(Q, dv), v_codes = static_cast<size_t>(bs) * v_row;
  const size_t k_page = k_codes + static_cast<size_t>(bs) * 2 * (d / G32);
  const size_t v_page = v_codes + static_cast<size_t>(bs) * 2 * (dv / G32);
  const typename V::lut_type lut = V::make_lut(kv_codebook(Q));
  alignas(64) float q[GC][kAttendMaxDim];
  alignas(64) float acc[GC][kAttendMaxDim];
  alignas(64) float p[GC][CK];   // scores, then probabilities, of the current chunk
  alignas(64) float pv[GC][CK];  // probabilities times one value group's scales
  float m[GC], l[GC];
  for (int g = 0; g < GC; ++g) {
    for (int i = 0; i < d; ++i) q[g][i] = a.q[(g0 + g) * d + i] * a.scale;
    for (int i = 0; i < dv; ++i) acc[g][i] = 0.0f;
    m[g] = -3.0e38f;
    l[g] = 0.0f;
  }
  const auto* kbase = static_cast<const uint8_t*>(a.k);
  const auto* vbase = static_cast<const uint8_t*>(a.v);
  const uint8_t* vcodes[CK];                 // [chunk keys] each key's V codes
  const uint16_t* vscales[CK / kAttendTile];  // [16-key steps] scales of the step's first key, group 0
  for (int chunk = 0; chunk < a.n_keys; chunk += CK) {
    const int n = a.n_keys - chunk < CK ? a.n_keys - chunk : CK;
    const int tiles = (n + B - 1) / B;
    for (int t = 0; t < tiles; ++t) {
      const int start = chunk + t * B;
      const uint8_t* kpage[NV];  // each vector's page, offset to its first key
      int kkey[NV];              // that key's index in the page
      for (int c = 0; c < NV; ++c) {
        const int pos = start + c * W < a.n_keys ? start + c * W : start;  // past the end: masked
        const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
        kkey[c] = pos % bs;
        kpage[c] = kbase + page * k_page;
      }
      for (int j = 0; j < B; j += kAttendTile) {
        const int pos = start + j;
        if (pos >= a.n_keys) break;
        const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
        const uint8_t* v0 = vbase + page * v_page;
        vscales[(t * B + j) / kAttendTile] = reinterpret_cast<const uint16_t*>(v0 + v_codes) + pos % bs;
        for (int r = 0; r < kAttendTile; ++r) vcodes[t * B + j + r] = v0 + static_cast<size_t>(pos % bs + r) * v_row;
      }
      const bool first_tile = start == 0;
      AheadPrefetch ahead(a, k_page, v_page, first_tile ? B : start + kAttendPrefetchTiles * B,
                          first_tile ? kAttendPrefetchTiles * B : B, kAttendTile, d);
      vec s[GC][NV];
      for (int g = 0; g < GC; ++g)
        for (int c = 0; c < NV; ++c) s[g][c] = V::zero();
      for (int group = 0; group < d / G32; ++group) {
        vec kscale[NV];
        for (int c = 0; c < NV; ++c)
          kscale[c] = V::load(reinterpret_cast<const uint16_t*>(kpage[c] + k_codes) + static_cast<size_t>(group) * bs + kkey[c]);
        for (int i = group * G32; i < group * G32 + G32; ++i) {
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
        for (int c = 0; c < NV; ++c) V::store(p[g] + t * B + c * W, s[g][c]);
    }
    attend_softmax_update<V, GC>(p, n, tiles * B, m, l, acc, dv);
    const int steps = (n + kAttendTile - 1) / kAttendTile;
    for (int group = 0; group < dv / G32; ++group) {
      for (int st = 0; st < steps; ++st)
        for (int w = 0; w < kAttendTile; w += W) {
          const vec sc = V::load(vscales[st] + static_cast<size_t>(group) * bs + w);
          for (int g = 0; g < GC; ++g) V::store(pv[g] + st * kAttendTile + w, V::mul(V::load(p[g] + st * kAttendTile + w), sc));
        }
      const size_t group_offset = static_cast<size_t>(group) * kv_code_bytes(Q, G32);
      for (int s0 = 0; s0 < SLICES; s0 += VS)
        attend_quant_values<V, Q, GC, VS>(pv, vcodes, group_offset, n, s0, group * G32 + s0 * W, acc, lut);
    }
  }
  for (int g = 0; g < GC; ++g) {
    const float inv = 1.0f / l[g];
    for (int i = 0; i < dv; ++i) a.out[(g0 + g) * dv + i] = acc[g][i] * inv;
  }
}

template <typename V, KvType Q>
void attend_quant(const AttendArgs& a) {
  constexpr int C = V::kMaxGroup;
  for (int g0 = 0; g0 < a.G; g0 += C) {
    switch (a.G - g0 < C ? a.G - g0 : C) {
      case 1: attend_quant_chunk<V, Q, 1>(a, g0); break;
      case 2: attend_quant_chunk<V, Q, (C >= 2 ? 2 : 1)>(a, g0); break;
      case 3: attend_quant_chunk<V, Q, (C >= 3 ? 3 : 1)>(a, g0); break;
      case 4: attend_quant_chunk<V, Q, (C >= 4 ? 4 : 1)>(a, g0); break;
      case 5: attend_quant_chunk<V, Q, (C >= 5 ? 5 : 1)>(a, g0); break;
      case 6: attend_quant_chunk<V, Q, (C >= 6 ? 6 : 1)>(a, g0); break;
      case 7: attend_quant_chunk<V, Q, (C >= 7 ? 7 : 1)>(a, g0); break;
      default: attend_quant_chunk<V, Q, (C >= 8 ? 8 : 1)>(a, g0); break;
    }
  }
}

// The kernel for K and V pages both of quantized type t.
template <typename V>
AttendFn attend_quant_for(KvType t) {
  switch (t) {
    case KvType::Q8_0: return attend_quant<V, KvType::Q8_0>;
    case KvType::Q4_0: return attend_quant<V, KvType::Q4_0>;
    case KvType::FP8: return attend_quant<V, KvType::FP8>;
    case KvType::TQ4: return attend_quant<V, KvType::TQ4>;
    case KvType::TQ3: return attend_quant<V, KvType::TQ3>;
    default: return nullptr;
  }
}

}  // namespace

// Per ISA: the kernel for pages of quantized type t (K and V alike); nullptr where the ISA has none.
AttendFn attend_quant_kernel_baseline(KvType t);
AttendFn attend_quant_kernel_avx2(KvType t);
AttendFn attend_quant_kernel_avx512(KvType t);

}  // namespace kestrel
