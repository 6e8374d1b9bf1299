// The page-wise attention kernel compiled for AVX-512 (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

#include "compute/cpu/simd_avx512.h"

namespace kestrel {
namespace {
struct AttendVec512 : Vec512 {
  static constexpr int kMaxGroup = 8;
  static constexpr int kTileKeys = 32;  // keys scored per tile
  static constexpr int kValueSlices = 2;  // value slices accumulated together
  // Quantized pages (attention_quant_impl.h).
  using lut_type = __m512;
  static itype widen_u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static type widen_i8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static itype srl(itype x, int n) { return _mm512_srl_epi32(x, _mm_cvtsi32_si128(n)); }
  static itype shl(itype x, int n) { return _mm512_sll_epi32(x, _mm_cvtsi32_si128(n)); }
  static itype srlv(itype x, itype n) { return _mm512_srlv_epi32(x, n); }
  static itype and_i(itype x, int m) { return _mm512_and_si512(x, _mm512_set1_epi32(m)); }
  static itype or_i(itype a, itype b) { return _mm512_or_si512(a, b); }
  static itype add_i(itype a, itype b) { return _mm512_add_epi32(a, b); }
  static itype set1_i(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static itype iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static type to_float(itype x) { return _mm512_cvtepi32_ps(x); }
  static type fp8(itype b) {  // sign to bit 15, exponent and mantissa under fp16's: the value / 256
    const itype h = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 8),
                                    _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x7F)), 7));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
  }
  static itype sub_i(itype a, itype b) { return _mm512_sub_epi32(a, b); }
  static constexpr int kDotOffset = 128;
  static itype load_i8x4(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static itype dot4(itype acc, itype k, int32_t q4) {  // vpdpbusd: k as unsigned (k + 128) times q signed
    const __m512i u = _mm512_xor_si512(k, _mm512_set1_epi8(static_cast<char>(0x80))), q = _mm512_set1_epi32(q4);
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(q));
    return acc;
  }
  static void store_int16(int16_t* p, itype v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtsepi32_epi16(v)); }
  static itype load_i8x2(const uint8_t* p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  // In-place accumulation in asm: GCC 12 copies the accumulators of unrolled vpdpwssd / vpdpbusd chains
  // between registers (and spills them) when they go through the intrinsics.
  static itype dot2(itype acc, itype v, int32_t p2) {
    const __m512i p = _mm512_set1_epi32(p2);
    asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(v), "v"(p));
    return acc;
  }
  static lut_type make_lut(const float* table) { return _mm512_loadu_ps(table); }
  static type lookup(lut_type t, itype idx) { return _mm512_permutexvar_ps(idx, t); }
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/attention_quant_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx512(bool f16) { return f16 ? attend<AttendVec512, uint16_t> : attend<AttendVec512, float>; }
AttendFn attend_quant_kernel_avx512() { return attend_pages<AttendVec512>; }
}  // namespace kestrel

// BF16 pages: scores with one vdpbf16ps per pair of dimensions (16 keys x 2 dims), values with one per
// pair of keys (16 dims x 2 keys). Probabilities are rounded to BF16 for the value products.
namespace kestrel {
namespace {

// One row (a pair of dimensions) of a tile's 16 keys: 32 bf16 from SPLIT pages (SPLIT = 16 / page size for
// pages of 4 or 8 keys).
template <int SPLIT>
__m512bh load_key_pairs(const uint16_t* const* parts, size_t row) {
  if constexpr (SPLIT == 1) {
    return (__m512bh)_mm512_loadu_si512(parts[0] + row);
  } else if constexpr (SPLIT == 2) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(parts[0] + row));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(parts[1] + row));
    return (__m512bh)_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(parts[0] + row)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(parts[1] + row)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(parts[2] + row)), 2);
    return (__m512bh)_mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(parts[3] + row)), 3);
  }
}

template <int GC, int SPLIT>
void attend_bf16_chunk(const AttendArgs& a, int g0) {
  constexpr int B = kAttendTile, CK = kAttendChunk, PART = B / SPLIT;
  const int d = a.d, dv = a.dv, bs = a.block_size;
  const int page_keys = bs < B ? bs : B;
  alignas(64) uint16_t qb[GC][kAttendMaxDim];  // scaled queries as bf16
  alignas(64) float acc[GC][kAttendMaxDim];
  alignas(64) float sc[GC][CK];     // scores of the current chunk
  alignas(64) uint16_t pb[GC][CK];  // their probabilities as bf16
  float m[GC], l[GC];
  for (int g = 0; g < GC; ++g) {
    for (int i = 0; i < d; i += 16) {
      const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(a.q + (g0 + g) * d + i), _mm512_set1_ps(a.scale));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb[g] + i), (__m256i)_mm512_cvtneps_pbh(x));
    }
    for (int i = 0; i < dv; ++i) acc[g][i] = 0.0f;
    m[g] = -3.0e38f;
    l[g] = 0.0f;
  }
  const auto* kbase = static_cast<const uint16_t*>(a.k);
  const auto* vbase = static_cast<const uint16_t*>(a.v);
  const uint16_t* vpair[CK / 2];  // [chunk key pairs] each pair's V row: [dv][2]
  // Stepped once per pair of dimensions of the scores: d / 2 steps per tile of B keys; a burst while the
  // first tile is scored, as attend_chunk does.
  const size_t key_bytes = sizeof(uint16_t) * (d + a.v_stride);
  const int rate = attend_stream_rate(key_bytes, B, d / 2), burst = attend_stream_rate(key_bytes, kAttendPrefetchKeys, d / 2);
  PageStreamPrefetch ahead(a, sizeof(uint16_t) * bs * d, sizeof(uint16_t) * bs * a.v_stride, kAttendPrefetchKeys, burst, rate);
  for (int chunk = 0; chunk < a.n_keys; chunk += CK) {
    const int n = a.n_keys - chunk < CK ? a.n_keys - chunk : CK;
    const int tiles = (n + B - 1) / B;
    for (int t = 0; t < tiles; ++t) {
      const int start = chunk + t * B;
      const uint16_t* kparts[SPLIT];  // pair rows [d / 2][bs][2] of each page of the tile
      for (int s = 0; s < SPLIT; ++s) {
        const int pos = start + s * PART < a.n_keys ? start + s * PART : start;  // past the end: masked
        const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
        kparts[s] = kbase + page * bs * d + (pos % bs) * 2;
      }
      for (int j = 0; j < B; j += page_keys) {
        const int pos = start + j;
        if (pos >= a.n_keys) break;
        const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[pos / bs];
        const uint16_t* v0 = vbase + page * bs * dv + ((pos % bs) / 2) * dv * 2;  // key-pair rows [bs / 2][dv][2]
        for (int r = 0; r < page_keys / 2; ++r) vpair[(t * B + j) / 2 + r] = v0 + static_cast<size_t>(r) * dv * 2;
      }
      ahead.advance_to(start);
      __m512 s[GC];
      for (int g = 0; g < GC; ++g) s[g] = _mm512_setzero_ps();
      for (int i = 0; i < d / 2; ++i) {
        ahead.step();
        const __m512bh k = load_key_pairs<SPLIT>(kparts, static_cast<size_t>(i) * bs * 2);
        for (int g = 0; g < GC; ++g) {
          const auto pair = reinterpret_cast<const int32_t*>(qb[g])[i];
          s[g] = _mm512_dpbf16_ps(s[g], k, (__m512bh)_mm512_set1_epi32(pair));
        }
      }
      for (int g = 0; g < GC; ++g) _mm512_store_ps(sc[g] + t * B, s[g]);
    }
    // The softmax update; the probabilities are kept rounded to bf16.
    float weight[GC];
    attend_softmax_update_with<AttendVec512, GC>(sc, n, tiles * B, m, l, acc, dv, weight, [&](int g, int j, __m512 e) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(pb[g] + j), (__m256i)_mm512_cvtneps_pbh(e));
    });
    const int pairs = (n + 1) / 2;  // a padding key has probability 0
    for (int i = 0; i < dv; i += 16) {
      __m512 o[GC];
      for (int g = 0; g < GC; ++g) o[g] = _mm512_loadu_ps(acc[g] + i);
      for (int j = 0; j < pairs; ++j) {
        const __m512bh v = (__m512bh)_mm512_loadu_si512(vpair[j] + static_cast<size_t>(i) * 2);
        for (int g = 0; g < GC; ++g) {
          const int32_t pair = reinterpret_cast<const int32_t*>(pb[g])[j];
          o[g] = _mm512_dpbf16_ps(o[g], v, (__m512bh)_mm512_set1_epi32(pair));
        }
      }
      for (int g = 0; g < GC; ++g) _mm512_storeu_ps(acc[g] + i, o[g]);
    }
  }
  attend_finish<GC>(a, g0, acc, m, l);
}

template <int SPLIT>
void attend_bf16_split(const AttendArgs& a) {
  for (int g0 = 0; g0 < a.G; g0 += 8) {
    switch (a.G - g0 < 8 ? a.G - g0 : 8) {
      case 1: attend_bf16_chunk<1, SPLIT>(a, g0); break;
      case 2: attend_bf16_chunk<2, SPLIT>(a, g0); break;
      case 3: attend_bf16_chunk<3, SPLIT>(a, g0); break;
      case 4: attend_bf16_chunk<4, SPLIT>(a, g0); break;
      case 5: attend_bf16_chunk<5, SPLIT>(a, g0); break;
      case 6: attend_bf16_chunk<6, SPLIT>(a, g0); break;
      case 7: attend_bf16_chunk<7, SPLIT>(a, g0); break;
      default: attend_bf16_chunk<8, SPLIT>(a, g0); break;
    }
  }
}

void attend_bf16(const AttendArgs& a) {
  if (a.block_size == 4) return attend_bf16_split<4>(a);
  if (a.block_size == 8) return attend_bf16_split<2>(a);
  attend_bf16_split<1>(a);
}

}  // namespace

AttendFn attend_kernel_bf16_avx512() { return attend_bf16; }

}  // namespace kestrel
