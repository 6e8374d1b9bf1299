// The 2:4 integer layouts that keep the file's 2-bit positions (S24_Q8x16P, S24_Q4x16P; packed_sparse24.h)
// on AVX-512 with VBMI: one vpmultishiftqb moves each row's 4 positions of a pair of groups into the 4 bytes
// of its control and one vpternlogd keeps their 2 bits and adds 4 to the second group's, where the masks
// layouts widen the masks and permute two tables (three operations on the shuffle port, which the gathering
// shuffle itself needs; on the Intel Xeon the shuffle port bounds the decode tile). Compiled with AVX-512 and
// VBMI flags, entered only where cpu_has_avx512_vbmi(); internal linkage throughout.
#include <immintrin.h>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_sparse_int_avx512_impl.h"

namespace kestrel {
namespace {

struct PositionControls {
  const __m512i three = _mm512_set1_epi8(3), second_group = _mm512_set1_epi32(0x04040000);
  // The 16 rows' controls of pair p of activation block a; positions: the block's positions (row r's 4
  // bytes of block a at 64 a + 4 r, byte p holding pair p's 4 positions at bits 0, 2, 4, 6). Byte j of a
  // row's control takes bits 8 p + 2 j of its dword (32 more for the odd row of each qword).
  __m512i operator()(const uint8_t* positions, int a, int p) const {
    const __m512i shifts = _mm512_set1_epi64(0x2624222006040200LL + 0x0808080808080808LL * p);
    const __m512i moved = _mm512_multishift_epi64_epi8(shifts, _mm512_loadu_si512(positions + 64 * a));
    return _mm512_ternarylogic_epi32(moved, three, second_group, 0xEA);  // (moved & 3) | second_group
  }
};

using PositionTiles = Avx512Sparse24Tiles<PositionControls>;

}  // namespace

PackedGemmFn packed_gemm_kernel_avx512vbmi(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::S24_Q8x16P: return sparse24_gemm<PositionTiles, PackedLayout::S24_Q8x16P>;
    case PackedLayout::S24_Q4x16P: return sparse24_gemm<PositionTiles, PackedLayout::S24_Q4x16P>;
    default: return nullptr;
  }
}

}  // namespace kestrel
