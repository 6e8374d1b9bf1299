// Weight matrices repacked for the integer GEMM kernels: rows in groups of 16, interleaved so one 64-byte
// vector holds 4 consecutive inputs of each of the 16 rows. A kernel then multiplies 16 rows by one token
// with one VNNI instruction per 4 inputs (lanes = rows), accumulates a 32-input block in int32, and
// applies the per-row block scales once per block. The same layout serves decode (1 token), batched
// decode and prefill. Bytes per weight equal the GGUF format's, so memory does not grow.
//
// Layout, per group of 16 rows and per block (groups outermost, blocks in input order). "Nibble tile": for
// 32 inputs of the 16 rows, 4 x 64 bytes where byte (g, row, j) holds q[4g+j] in its low nibble and
// q[4g+16+j] in its high nibble.
//   Q4_0x16 (32 inputs):  fp16 d[16]; nibble tile (q in 0..15, w = d * (q - 8)).                  288 bytes
//   Q8_0x16 (32 inputs):  fp16 d[16]; 8 x 64 bytes, byte (g, row, j) = q[4g+j] + 128 (w = d * q).  544 bytes
//   Q4_1x16 (32 inputs):  fp16 d[16], fp16 m[16]; nibble tile (w = d * q + m).                      320 bytes
//   "Quint tile" of 32 5-bit codes for 16 rows: 5 x 64 bytes; for u < 4, byte (u, row, j) holds q[4u+j] in
//   bits 0-4 and bits 2-4 of q[4u+16+j] in bits 5-7, and byte (4, row, j) holds bits 0-1 of q[4u+16+j] at
//   bits 2u, 2u+1 (so half the codes are one AND away, the other half a shift and an OR of two fields).
//   Q5_0x16 (32 inputs):  fp16 d[16]; quint tile (w = d * (q - 16)).                               352 bytes
//   Q5_1x16 (32 inputs):  fp16 d[16], fp16 m[16]; quint tile (w = d * q + m).                      384 bytes
//   Q4_Kx16 (256 inputs): fp16 d[16], fp16 dmin[16], u8 scales[12][16] (each row's 12 bytes of 6-bit
//                         sub-block scales and mins, packed as in the file), then a nibble tile per
//                         32-input sub-block (w = d * sc * q - dmin * m).                          2304 bytes
//   Q5_Kx16 (256 inputs): Q4_Kx16's 256-byte head (d, dmin, scales), then a quint tile per 32-input
//                         sub-block.                                                               2816 bytes
//   "Crumb tile" of 32 inputs for 16 rows: 2 x 64 bytes, bits 2c of byte (v, row, j) = the 2-bit q[16v+4c+j].
//   Q2_Kx16 (256 inputs): fp16 d[16], fp16 dmin[16], u8 scales[16][16] (the file's byte per sub-block of 16:
//                         4-bit scale low, 4-bit min high), then a crumb tile per 32 inputs
//                         (w = d * sc * q - dmin * m).                                             1344 bytes
//   "Triad tile" of 32 3-bit codes for 16 rows: 3 x 64 bytes; byte (v, row, j) holds q[8v+j] in bits 0-2 and
//   q[8v+4+j] in bits 3-5; bits 6-7 of bytes (0, row, j) and (1, row, j) hold bits 0-1 of q[24+j] and
//   q[28+j], whose bit 2 is bit 7 and bit 6 of byte (2, row, j).
//   Q3_Kx16 (256 inputs): fp16 d[16], u8 scales[12][16] (each row's 12 bytes of 6-bit scales, as in the
//                         file), then a triad tile per 32 inputs (w = d * (sc - 32) * (q - 4)).      1760 bytes
//   "Sextet tile" of 32 6-bit codes for 16 rows: 6 x 64 bytes; for u < 4, byte (u, row, j) holds q[4u+j] in
//   bits 0-5 and bits 4-5 of q[4u+16+j] in bits 6-7, and byte (4 + v, row, j) holds bits 0-3 of q[8v+16+j]
//   in its low nibble and of q[8v+20+j] in its high one.
//   Q6_Kx16 (256 inputs): fp16 d[16], i8 sc[16][16] (per 16 inputs), then a sextet tile per 32 inputs
//                         (w = d * sc * (q - 32)).                                                  3360 bytes
//   BF16x16 (32 inputs):  16 x 64 bytes: (pair p, row, 2) = bf16 w[2p], w[2p+1] (from F16 or BF16 weights),
//                         multiplied with bf16 activations by vdpbf16ps (CPUs with AVX-512 BF16).   1024 bytes
//   F16Fma16 / BF16Fma16 (32 inputs): 32 x 16 weights as in the file (fp16 or bf16 bits), input-major:
//                         (input k, row) at 2 * (16 k + row); widened to fp32 in registers and multiplied
//                         with float activations by FMA (exact: no rounding of the weights).        1024 bytes
//   F32Fma16 (32 inputs):  32 x 16 fp32 weights, input-major: (input k, row) at 4 * (16 k + row).        2048 bytes
// The 2:4 sparse layouts (64 inputs: one file block of quant/sparse24.h per row), each ending in 128 bytes
// of the kept values' positions, arranged per layout (compute/cpu/packed_sparse24.h):
//   S24_Q8x16:  fp16 d[16]; per pair v of 4-input groups (2v, 2v + 1) 64 bytes, byte 4 r + m = row r's kept
//               value m (m = 0, 1: group 2v's; 2, 3: group 2v + 1's) as int8 q; positions.       672 bytes
//   S24_Q4x16:  fp16 d[16]; 4 x 64 bytes: byte 4 r + m of u holds pair u's code q (0..15, w = d (q - 8))
//               in its low nibble and pair u + 4's in its high one; positions.                     416 bytes
//   S24_F16x16: fp16 kept values (group k, value s, row) at 2 (32 k + 16 s + row); positions.     1152 bytes
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "compute/cpu/isa.h"
#include "compute/cpu/q8_activations.h"
#include "compute/ops.h"

namespace kestrel {

enum class PackedLayout {
  Q4_0x16, Q8_0x16, Q4_Kx16, Q6_Kx16, BF16x16, F16Fma16, BF16Fma16, Q4_1x16, Q5_0x16, Q5_1x16, Q5_Kx16, Q2_Kx16, Q3_Kx16,
  S24_Q8x16, S24_Q4x16, S24_F16x16, F32Fma16
};

// Whether the layout is multiplied by 8-bit activation blocks (PackedGemmFn).
inline bool packed_layout_is_integer(PackedLayout l) {
  return l != PackedLayout::BF16x16 && l != PackedLayout::F16Fma16 && l != PackedLayout::BF16Fma16 && l != PackedLayout::S24_F16x16 &&
         l != PackedLayout::F32Fma16;
}
// Inputs per packed block: 256 for the K-quant layouts, 64 for the 2:4 ones, else 32.
constexpr int packed_block_inputs(PackedLayout l) {
  switch (l) {
    case PackedLayout::Q2_Kx16:
    case PackedLayout::Q3_Kx16:
    case PackedLayout::Q4_Kx16:
    case PackedLayout::Q5_Kx16:
    case PackedLayout::Q6_Kx16: return 256;
    case PackedLayout::S24_Q8x16:
    case PackedLayout::S24_Q4x16:
    case PackedLayout::S24_F16x16: return 64;
    default: return 32;
  }
}

// Plain data a kernel needs (the ISA-specific files use only this, no inline library code, so nothing
// compiled for a wider ISA can be shared with baseline code by the linker).
struct PackedView {
  const uint8_t* data;  // [n_groups][n_blocks][block_bytes]
  int64_t n_blocks;
  size_t block_bytes;
  // The bytes the calling thread streams right after this call's last group (the following group, or the
  // head of the next matrix of its pass), or null: the kernels' software prefetch runs on into them
  // instead of stopping, so a new stream does not start cold. Null: no prefetch past the last group.
  const uint8_t* next = nullptr;
  bool accumulate = false;  // add the products into y (y += W x, e.g. into the residual stream) instead of writing them
};

// Float weights (F16, BF16, F32) pack for any shape: rows and inputs past the matrix's own are zeros up to
// whole 16-row groups and 32-input blocks, so n_in and n_out here may exceed the WeightMatrix's; the caller
// gives the kernels activations of n_in (zeros past its own) and drops the extra rows (ops::matmul does).
struct PackedMatrix {
  static constexpr int kRows = 16;
  PackedLayout layout = PackedLayout::Q4_0x16;
  int64_t n_in = 0;   // inputs, a whole number of blocks
  int64_t n_out = 0;  // rows, a whole number of groups
  int block_inputs = 32;   // inputs per block (32, or 256 for the K-quants)
  size_t block_bytes = 0;  // bytes per (16-row group, block)
  std::shared_ptr<uint8_t[]> data;  // [n_out / 16][n_in / 32][block_bytes], 64-byte aligned

  int64_t n_groups() const { return n_out / kRows; }
  int64_t n_blocks() const { return n_in / block_inputs; }
  const uint8_t* block(int64_t group, int64_t b) const {
    return data.get() + (static_cast<size_t>(group) * static_cast<size_t>(n_blocks()) + static_cast<size_t>(b)) * block_bytes;
  }
  size_t bytes() const { return static_cast<size_t>(n_groups() * n_blocks()) * block_bytes; }
  // The kernels' view; `next` and `accumulate` as in PackedView.
  PackedView view(const uint8_t* next = nullptr, bool accumulate = false) const {
    return {data.get(), n_blocks(), block_bytes, next, accumulate};
  }
  // What a thread walking the groups in order streams after group end - 1: group `end`, or past the last
  // group `then` (for PackedView::next).
  const uint8_t* after_group(int64_t end, const uint8_t* then) const { return end < n_groups() ? block(end, 0) : then; }

  // Whether a matrix of this type and shape has a packed layout (n_out a multiple of 16 and n_in of the
  // block, or float weights of any shape) with a fast kernel on this ISA level.
  static bool supports(DType type, int64_t n_in, int64_t n_out, Isa isa);
  // A packed copy of w in the layout for this ISA level's kernels (F16 and BF16: BF16x16 where the CPU has
  // AVX-512 BF16, else the Fma16 layouts; F32: F32Fma16), or nullopt when the type or shape has no packed
  // layout.
  static std::optional<PackedMatrix> pack(const WeightMatrix& w, Isa isa = detected_isa());
  // w packed in a given layout of its type (F16 and BF16 have several), or nullopt.
  static std::optional<PackedMatrix> pack(const WeightMatrix& w, PackedLayout layout);
};

// y[t, r] for rows in groups [group_begin, group_end) and tokens [0, n_tok): the integer GEMM against
// 8-bit activation blocks xq [n_tok, n_in / 32]. y is [n_tok, y_stride].
using PackedGemmFn = void (*)(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t y_stride,
                              int64_t group_begin, int64_t group_end);
// The kernel of a layout for an ISA level (on AVX-512, the 2:4 integer layouts take their VBMI kernels where
// the CPU has VBMI), else the reference.
PackedGemmFn packed_gemm_kernel(PackedLayout layout, Isa isa);
PackedGemmFn packed_gemm_kernel_avx2(PackedLayout layout);
PackedGemmFn packed_gemm_kernel_avx512(PackedLayout layout);
PackedGemmFn packed_gemm_kernel_avx512vbmi(PackedLayout layout);  // S24_Q8x16, S24_Q4x16 (CPUs with VBMI); others: null
PackedGemmFn packed_gemm_kernel_neon(PackedLayout layout);
// Scalar reference over the same packed bytes.
PackedGemmFn packed_gemm_reference(PackedLayout layout);

// The BF16x16 layout's GEMM: activations are bf16 bits xb [n_tok, n_in].
using PackedGemmBf16Fn = void (*)(PackedView w, const uint16_t* xb, int n_tok, float* y, size_t y_stride,
                                  int64_t group_begin, int64_t group_end);
PackedGemmBf16Fn packed_gemm_bf16_kernel(Isa isa);  // the AVX-512 BF16 kernel, or the reference
PackedGemmBf16Fn packed_gemm_bf16_kernel_avx512();
void packed_gemm_bf16_reference(PackedView w, const uint16_t* xb, int n_tok, float* y, size_t y_stride,
                                int64_t group_begin, int64_t group_end);
// The Fma16 layouts' GEMM: float activations x [n_tok, n_in].
using PackedGemmF32Fn = void (*)(PackedView w, const float* x, int n_tok, float* y, size_t y_stride,
                                 int64_t group_begin, int64_t group_end);
// The AVX-512 kernel (S24_F16x16 only), the AVX2 or NEON kernel, or the reference.
PackedGemmF32Fn packed_gemm_f32_kernel(PackedLayout layout, Isa isa);
PackedGemmF32Fn packed_gemm_f32_kernel_avx512(PackedLayout layout);
PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout layout);
PackedGemmF32Fn packed_gemm_f32_kernel_neon(PackedLayout layout);
PackedGemmF32Fn packed_gemm_f32_reference(PackedLayout layout);  // nullptr for the other layouts
// The weights of row `row` (0..15) of one packed block, decoded to floats: out[block inputs].
void unpack_block_row(PackedLayout layout, const uint8_t* block, int row, float* out);

}  // namespace kestrel
