// The page-wise attention kernel compiled for AVX-512 (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

namespace kestrel {
namespace {
struct Vec512 {
  using type = __m512;
  static constexpr int W = 16;
  static constexpr int kMaxGroup = 8;
  static type zero() { return _mm512_setzero_ps(); }
  static type set1(float x) { return _mm512_set1_ps(x); }
  static type load(const float* p) { return _mm512_loadu_ps(p); }
  static type load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(float* p, type v) { _mm512_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm512_add_ps(a, b); }
  static type sub(type a, type b) { return _mm512_sub_ps(a, b); }
  static type mul(type a, type b) { return _mm512_mul_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
  static type max(type a, type b) { return _mm512_max_ps(a, b); }
  static float reduce_max(type v) { return _mm512_reduce_max_ps(v); }
  static float reduce_add(type v) { return _mm512_reduce_add_ps(v); }
  static type exp(type x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const type t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
    const type n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const type f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147181f));
    type p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx512(bool f16) { return f16 ? attend<Vec512, uint16_t> : attend<Vec512, float>; }
}  // namespace kestrel

// BF16 pages: scores with one vdpbf16ps per pair of dimensions (16 keys x 2 dims), values with one per
// pair of keys (16 dims x 2 keys). Probabilities are rounded to BF16 for the value products.
namespace kestrel {
namespace {

template <int GC>
void attend_bf16_chunk(const AttendArgs& a, int g0) {
  constexpr int B = kAttendTile, CK = kAttendChunk;
  const int d = a.d, dv = a.dv, bs = a.block_size;
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
  const uint16_t* vtile[CK / B];  // [tiles] first key-pair row of each tile's V
  for (int chunk = 0; chunk < a.n_keys; chunk += CK) {
    const int n = a.n_keys - chunk < CK ? a.n_keys - chunk : CK;
    const int tiles = (n + B - 1) / B;
    for (int t = 0; t < tiles; ++t) {
      const int start = chunk + t * B;
      const size_t page = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[start / bs];
      const int offset = start % bs;
      const uint16_t* kp = kbase + page * bs * d + offset * 2;         // pair rows [d / 2][bs][2]
      vtile[t] = vbase + page * bs * dv + (offset / 2) * dv * 2;        // key-pair rows [bs / 2][dv][2]
      if (const int ahead = start + kAttendPrefetchTiles * B; ahead < a.n_keys && ahead % bs == 0) {
        const size_t next = static_cast<size_t>(a.kv_head) * a.n_blocks + a.table[ahead / bs];
        const char* kn = reinterpret_cast<const char*>(kbase + next * bs * d);
        const char* vn = reinterpret_cast<const char*>(vbase + next * bs * dv);
        for (size_t off = 0; off < 2u * bs * d; off += 64) _mm_prefetch(kn + off, _MM_HINT_T0);
        for (size_t off = 0; off < 2u * bs * dv; off += 64) _mm_prefetch(vn + off, _MM_HINT_T0);
      }
      __m512 s[GC];
      for (int g = 0; g < GC; ++g) s[g] = _mm512_setzero_ps();
      for (int i = 0; i < d / 2; ++i) {
        const __m512bh k = (__m512bh)_mm512_loadu_si512(kp + static_cast<size_t>(i) * bs * 2);
        for (int g = 0; g < GC; ++g) {
          const auto pair = reinterpret_cast<const int32_t*>(qb[g])[i];
          s[g] = _mm512_dpbf16_ps(s[g], k, (__m512bh)_mm512_set1_epi32(pair));
        }
      }
      const int nt = n - t * B;
      const __mmask16 valid = static_cast<__mmask16>(nt >= B ? 0xFFFF : (1u << nt) - 1);
      for (int g = 0; g < GC; ++g)
        _mm512_store_ps(sc[g] + t * B, _mm512_mask_blend_ps(valid, _mm512_set1_ps(-3.0e38f), s[g]));
    }
    for (int g = 0; g < GC; ++g) {
      __m512 mx = _mm512_load_ps(sc[g]);
      for (int t = 1; t < tiles; ++t) mx = _mm512_max_ps(mx, _mm512_load_ps(sc[g] + t * B));
      const float chunk_max = _mm512_reduce_max_ps(mx);
      const float new_max = m[g] > chunk_max ? m[g] : chunk_max;
      const float correction = attend_exp_scalar(m[g] - new_max);
      const __m512 shift = _mm512_set1_ps(new_max);
      __m512 sum = _mm512_setzero_ps();
      for (int t = 0; t < tiles; ++t) {
        const __m512 e = Vec512::exp(_mm512_sub_ps(_mm512_load_ps(sc[g] + t * B), shift));
        _mm256_store_si256(reinterpret_cast<__m256i*>(pb[g] + t * B), (__m256i)_mm512_cvtneps_pbh(e));
        sum = _mm512_add_ps(sum, e);
      }
      l[g] = l[g] * correction + _mm512_reduce_add_ps(sum);
      m[g] = new_max;
      if (correction != 1.0f)
        for (int i = 0; i < dv; i += 16)
          _mm512_storeu_ps(acc[g] + i, _mm512_mul_ps(_mm512_loadu_ps(acc[g] + i), _mm512_set1_ps(correction)));
    }
    for (int i = 0; i < dv; i += 16) {
      __m512 o[GC];
      for (int g = 0; g < GC; ++g) o[g] = _mm512_loadu_ps(acc[g] + i);
      for (int t = 0; t < tiles; ++t) {
        const int nt = n - t * B < B ? n - t * B : B;
        const int pairs = (nt + 1) / 2;  // a padding key has probability 0
        for (int j = 0; j < pairs; ++j) {
          const __m512bh v = (__m512bh)_mm512_loadu_si512(vtile[t] + (static_cast<size_t>(j) * dv + i) * 2);
          for (int g = 0; g < GC; ++g) {
            const int32_t pair = reinterpret_cast<const int32_t*>(pb[g] + t * B)[j];
            o[g] = _mm512_dpbf16_ps(o[g], v, (__m512bh)_mm512_set1_epi32(pair));
          }
        }
      }
      for (int g = 0; g < GC; ++g) _mm512_storeu_ps(acc[g] + i, o[g]);
    }
  }
  for (int g = 0; g < GC; ++g) {
    const float inv = 1.0f / l[g];
    for (int i = 0; i < dv; ++i) a.out[(g0 + g) * dv + i] = acc[g][i] * inv;
  }
}

void attend_bf16(const AttendArgs& a) {
  for (int g0 = 0; g0 < a.G; g0 += 8) {
    switch (a.G - g0 < 8 ? a.G - g0 : 8) {
      case 1: attend_bf16_chunk<1>(a, g0); break;
      case 2: attend_bf16_chunk<2>(a, g0); break;
      case 3: attend_bf16_chunk<3>(a, g0); break;
      case 4: attend_bf16_chunk<4>(a, g0); break;
      case 5: attend_bf16_chunk<5>(a, g0); break;
      case 6: attend_bf16_chunk<6>(a, g0); break;
      case 7: attend_bf16_chunk<7>(a, g0); break;
      default: attend_bf16_chunk<8>(a, g0); break;
    }
  }
}

}  // namespace

AttendFn attend_kernel_bf16_avx512() { return attend_bf16; }

}  // namespace kestrel
