// The page-wise attention kernel compiled for AVX2 + FMA + F16C (see attention_impl.h).
#include <immintrin.h>

#include <cstdint>

#include "compute/cpu/simd_avx2.h"

namespace kestrel {
namespace {
struct AttendVec256 : Vec256 {
  // 8 heads x 2 vectors of keys: 16 score registers, and 8 heads x 2 value slices: 16 accumulators (GCC keeps
  // a few of each in L1). Passes of 4 heads read and converted every key twice: f16 pages ran 9-15% slower,
  // q4_0 20%, tq4 and tq3 26-32% (BENCHMARKS.md).
  static constexpr int kMaxGroup = 8;
  static constexpr int kTileKeys = 16;  // keys scored per tile
  static constexpr int kValueSlices = 2;  // value slices accumulated together
  // Quantized pages (attention_quant_impl.h).
  struct lut_type { __m256 lo, hi; };
  static itype widen_u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static type widen_i8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static itype srl(itype x, int n) { return _mm256_srl_epi32(x, _mm_cvtsi32_si128(n)); }
  static itype shl(itype x, int n) { return _mm256_sll_epi32(x, _mm_cvtsi32_si128(n)); }
  static itype srlv(itype x, itype n) { return _mm256_srlv_epi32(x, n); }
  static itype and_i(itype x, int m) { return _mm256_and_si256(x, _mm256_set1_epi32(m)); }
  static itype or_i(itype a, itype b) { return _mm256_or_si256(a, b); }
  static itype add_i(itype a, itype b) { return _mm256_add_epi32(a, b); }
  static itype set1_i(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static itype iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static type to_float(itype x) { return _mm256_cvtepi32_ps(x); }
  static type fp8(itype b) {  // sign to bit 15, exponent and mantissa under fp16's: the value / 256
    const itype h = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 8),
                                    _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7F)), 7));
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  }
  static itype sub_i(itype a, itype b) { return _mm256_sub_epi32(a, b); }
  static constexpr int kDotOffset = 0;
  static itype load_i8x4(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static itype dot4(itype acc, itype k, int32_t q4) {  // |q| (unsigned) times k with q's sign: pairs fit int16
    const __m256i q = _mm256_set1_epi32(q4);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(k, q));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static void store_int16(int16_t* p, itype v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
  }
  static itype load_i8x2(const uint8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static itype dot2(itype acc, itype v, int32_t p2) { return _mm256_add_epi32(acc, _mm256_madd_epi16(v, _mm256_set1_epi32(p2))); }
  static lut_type make_lut(const float* table) { return {_mm256_loadu_ps(table), _mm256_loadu_ps(table + 8)}; }
  static type lookup(const lut_type& t, itype idx) {  // entries 0-7 and 8-15, chosen by bit 3 of each index
    const __m256 lo = _mm256_permutevar8x32_ps(t.lo, idx), hi = _mm256_permutevar8x32_ps(t.hi, idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  }
};
}  // namespace
}  // namespace kestrel

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/attention_quant_impl.h"

namespace kestrel {
AttendFn attend_kernel_avx2(bool f16) { return f16 ? attend<AttendVec256, uint16_t> : attend<AttendVec256, float>; }
AttendFn attend_quant_kernel_avx2() { return attend_pages<AttendVec256>; }
}  // namespace kestrel
