// The 2:4 integer layouts (S24_Q8x16, S24_Q4x16; packed_sparse24.h) on AVX-512 with VBMI: one
// vpmultishiftqb moves each row's 4 positions of a pair of groups into the 4 bytes of its control and one
// vpternlogd keeps their 2 bits and adds the control offsets, where NibbleControls spend a shuffle, two
// shifts and an or (the shuffle on the port that the gathering shuffle itself needs; on the Intel Xeon that
// port bounds the decode tile). Compiled with AVX-512 and VBMI flags, entered only where
// cpu_has_avx512_vbmi(); internal linkage throughout.
#include <immintrin.h>

#include "compute/cpu/gemm_driver.h"
#include "compute/cpu/gemm_sparse_int_avx512_impl.h"

namespace kestrel {
namespace {

struct BitFieldControls {
  const __m512i three = _mm512_set1_epi8(3), offsets = _mm512_set1_epi32(static_cast<int>(kSparse24ControlOffsets));
  // The 16 rows' controls of pair p of activation block a; meta: the block's positions (row r's dword p / 2
  // at 64 (p / 2) + 4 r). Byte c of a row's control (group c / 2's kept value c % 2) takes bits
  // 8 (2 (p % 2) + c / 2) + 4 a + 2 (c % 2) of its dword (32 more for the odd row of each qword).
  __m512i operator()(const uint8_t* meta, int a, int p) const {
    const __m512i shifts = _mm512_set1_epi64(0x2A2822200A080200LL + 0x0101010101010101LL * (16 * (p % 2) + 4 * a));
    const __m512i moved = _mm512_multishift_epi64_epi8(shifts, _mm512_loadu_si512(meta + 64 * (p / 2)));
    return _mm512_ternarylogic_epi32(moved, three, offsets, 0xEA);  // (moved & 3) | offsets
  }
};

using BitFieldTiles = Avx512Sparse24Tiles<BitFieldControls>;

}  // namespace

PackedGemmFn packed_gemm_kernel_avx512vbmi(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::S24_Q8x16: return sparse24_gemm<BitFieldTiles, PackedLayout::S24_Q8x16>;
    case PackedLayout::S24_Q4x16: return sparse24_gemm<BitFieldTiles, PackedLayout::S24_Q4x16>;
    default: return nullptr;
  }
}

}  // namespace kestrel
