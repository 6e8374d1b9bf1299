#include "compute/cpu/packed_matrix.h"

#include <cstdlib>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

std::shared_ptr<uint8_t[]> aligned_bytes(size_t n) {
  void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// q value (0..15) of element k of a Q4_0 block.
int q4_0_value(const BlockQ4_0& b, int k) { return k < 16 ? (b.qs[k] & 0xF) : (b.qs[k - 16] >> 4); }

}  // namespace

bool PackedMatrix::supports(DType type, int64_t n_in, int64_t n_out) {
  return (type == DType::Q4_0 || type == DType::Q8_0) && n_out % kRows == 0 && n_in % 32 == 0;
}

std::optional<PackedMatrix> PackedMatrix::pack(const WeightMatrix& w) {
  if (!supports(w.type, w.n_in, w.n_out)) return std::nullopt;
  PackedMatrix p;
  p.n_in = w.n_in;
  p.n_out = w.n_out;
  switch (w.type) {
    case DType::Q4_0: p.layout = PackedLayout::Q4_0x16; p.block_bytes = 32 + 256; break;
    case DType::Q8_0: p.layout = PackedLayout::Q8_0x16; p.block_bytes = 32 + 512; break;
    default: return std::nullopt;
  }
  p.data = aligned_bytes(p.bytes());
  for (int64_t g = 0; g < p.n_groups(); ++g) {
    for (int64_t b = 0; b < p.n_blocks(); ++b) {
      uint8_t* out = p.data.get() + (static_cast<size_t>(g * p.n_blocks() + b)) * p.block_bytes;
      auto* scales = reinterpret_cast<uint16_t*>(out);  // [16]
      uint8_t* q = out + 32;
      for (int i = 0; i < kRows; ++i) {
        const uint8_t* row = w.row(g * kRows + i);
        if (p.layout == PackedLayout::Q4_0x16) {
          const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          scales[i] = blk.d;
          for (int grp = 0; grp < 4; ++grp)
            for (int j = 0; j < 4; ++j)
              q[grp * 64 + i * 4 + j] =
                  static_cast<uint8_t>(q4_0_value(blk, 4 * grp + j) | (q4_0_value(blk, 4 * grp + 16 + j) << 4));
        } else {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          scales[i] = blk.d;
          for (int grp = 0; grp < 8; ++grp)
            for (int j = 0; j < 4; ++j) q[grp * 64 + i * 4 + j] = static_cast<uint8_t>(blk.qs[4 * grp + j] + 128);
        }
      }
    }
  }
  return p;
}

namespace {
template <PackedLayout L>
void reference(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t y_stride, int64_t group_begin,
               int64_t group_end) {
  const int64_t nb = w.n_blocks;
  for (int64_t g = group_begin; g < group_end; ++g)
    for (int t = 0; t < n_tok; ++t)
      for (int i = 0; i < PackedMatrix::kRows; ++i) {
        double sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = w.data + static_cast<size_t>(g * nb + b) * w.block_bytes;
          const float d = fp16_to_fp32(reinterpret_cast<const uint16_t*>(blk)[i]);
          const uint8_t* q = blk + 32;
          const BlockQ8A& xb = xq[static_cast<size_t>(t) * nb + b];
          int32_t dot = 0;
          for (int k = 0; k < 32; ++k) {
            int wq;
            if (L == PackedLayout::Q4_0x16) {
              const uint8_t byte = q[(k % 16) / 4 * 64 + i * 4 + k % 4];
              wq = (k < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
            } else {
              wq = static_cast<int>(q[k / 4 * 64 + i * 4 + k % 4]) - 128;
            }
            dot += wq * xb.qs[k];
          }
          sum += static_cast<double>(d) * xb.d * dot;
        }
        y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(g) * PackedMatrix::kRows + i] = static_cast<float>(sum);
      }
}
}  // namespace

void packed_gemm_reference_q4_0(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t y_stride,
                                int64_t group_begin, int64_t group_end) {
  reference<PackedLayout::Q4_0x16>(w, xq, n_tok, y, y_stride, group_begin, group_end);
}
void packed_gemm_reference_q8_0(PackedView w, const BlockQ8A* xq, int n_tok, float* y, size_t y_stride,
                                int64_t group_begin, int64_t group_end) {
  reference<PackedLayout::Q8_0x16>(w, xq, n_tok, y, y_stride, group_begin, group_end);
}

#if !defined(KESTREL_HAVE_X86_KERNELS)
PackedGemmFn packed_gemm_kernel_avx2(PackedLayout) { return nullptr; }
PackedGemmFn packed_gemm_kernel_avx512(PackedLayout) { return nullptr; }
#endif

PackedGemmFn packed_gemm_kernel(PackedLayout layout, Isa isa) {
  PackedGemmFn fn = nullptr;
  if (isa >= Isa::Avx512) fn = packed_gemm_kernel_avx512(layout);
  if (!fn && isa >= Isa::Avx2) fn = packed_gemm_kernel_avx2(layout);
  if (fn) return fn;
  return layout == PackedLayout::Q4_0x16 ? packed_gemm_reference_q4_0 : packed_gemm_reference_q8_0;
}

}  // namespace kestrel
