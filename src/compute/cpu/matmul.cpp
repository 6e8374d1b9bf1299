// Matrix multiplication against weight rows of any supported type (see docs/compute.md for the paths):
// packed integer or BF16 GEMM, integer row dots, float row dots, and for many float tokens a tile of
// decoded rows that the tokens stream past.
#include <algorithm>
#include <vector>

#include "compute/cpu/dot.h"
#include "compute/cpu/packed_matrix.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "quant/quantize.h"

namespace kestrel::ops {
namespace {
constexpr int kDirectMaxTokens = 4;  // up to this many tokens, dot the encoded rows directly
constexpr int64_t kRowTile = 16;     // rows decoded together for prefill
constexpr int kQuantizeInPassTokens = 8;  // up to this many tokens, each GEMM thread quantizes the input

bool packed_q8(const WeightMatrix& w) { return w.packed && w.packed->layout != PackedLayout::BF16x16; }

// GEMM threads take chunks of row groups as they finish (about 8 per thread), so a thread whose core is
// also busy with other work does less of the GEMM instead of holding the others at the barrier.
size_t dynamic_chunk(const ThreadPool& pool, size_t n_groups) {
  return std::max<size_t>(1, n_groups / (8 * static_cast<size_t>(pool.n_threads())));
}

// xq[n_tok, n_in / 32] <- x[n_tok, n_in], one token per task.
std::vector<BlockQ8A> quantize_rows(ThreadPool& pool, const float* x, size_t n_in, int n_tok) {
  const size_t nb = n_in / 32;
  const QuantizeQ8AFn quantize = quantize_q8a_kernel(detected_isa());
  std::vector<BlockQ8A> xq(static_cast<size_t>(n_tok) * nb);
  pool.parallel_for(static_cast<size_t>(n_tok), 1, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) quantize(x + t * n_in, xq.data() + t * nb, n_in);
  });
  return xq;
}

// Packed integer GEMM for matrices sharing one input: the input is quantized once, and one parallel pass
// walks the row groups of all matrices, so the threads meet once instead of once per matrix. For a few
// tokens (decode) each thread quantizes the input itself inside that pass: it costs less than a separate
// parallel pass, whose single task would leave the other threads waiting.
void packed_q8_gemm(ThreadPool& pool, std::span<const WeightMatrix> ws, const float* x, std::span<float* const> ys,
                    int n_tok) {
  const size_t n_in = static_cast<size_t>(ws[0].n_in), nb = n_in / 32;
  const bool quantize_in_pass = n_tok <= kQuantizeInPassTokens;
  const std::vector<BlockQ8A> shared_xq = quantize_in_pass ? std::vector<BlockQ8A>() : quantize_rows(pool, x, n_in, n_tok);
  const QuantizeQ8AFn quantize = quantize_q8a_kernel(detected_isa());
  std::vector<size_t> first_group(ws.size() + 1, 0);  // [n_matrices + 1] prefix sums of group counts
  for (size_t i = 0; i < ws.size(); ++i) first_group[i + 1] = first_group[i] + static_cast<size_t>(ws[i].packed->n_groups());
  const size_t n_groups = first_group.back(), chunk = dynamic_chunk(pool, n_groups);
  std::vector<std::vector<BlockQ8A>> own_xq(quantize_in_pass ? pool.n_threads() : 0);  // per thread [n_tok, nb]
  pool.parallel_for_dynamic(n_groups, chunk, [&](size_t begin, size_t end, int thread) {
    const BlockQ8A* xq = shared_xq.data();
    if (quantize_in_pass) {
      std::vector<BlockQ8A>& own = own_xq[static_cast<size_t>(thread)];
      if (own.empty()) {
        own.resize(static_cast<size_t>(n_tok) * nb);
        for (size_t t = 0; t < static_cast<size_t>(n_tok); ++t) quantize(x + t * n_in, own.data() + t * nb, n_in);
      }
      xq = own.data();
    }
    for (size_t i = 0; i < ws.size(); ++i) {
      const size_t b = std::max(begin, first_group[i]), e = std::min(end, first_group[i + 1]);
      if (b >= e) continue;
      const PackedMatrix& p = *ws[i].packed;
      packed_gemm_kernel(p.layout, detected_isa())(p.view(), xq, n_tok, ys[i], static_cast<size_t>(p.n_out),
                                                   static_cast<int64_t>(b - first_group[i]),
                                                   static_cast<int64_t>(e - first_group[i]));
    }
  });
}

}  // namespace

void matmul_many(ThreadPool& pool, std::span<const WeightMatrix> ws, const float* x, std::span<float* const> ys,
                 int n_tok) {
  bool fused = !ws.empty();
  for (const WeightMatrix& w : ws) fused = fused && packed_q8(w) && w.n_in == ws[0].n_in;
  if (fused) return packed_q8_gemm(pool, ws, x, ys, n_tok);
  for (size_t i = 0; i < ws.size(); ++i) matmul(pool, ws[i], x, ys[i], n_tok);
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok) {
  const size_t n_in = static_cast<size_t>(w.n_in);
  const size_t n_out = static_cast<size_t>(w.n_out);
  if (w.packed && w.packed->layout == PackedLayout::BF16x16) {
    // F16/BF16 weights packed as BF16: activations to BF16 once, then the BF16 dot-product GEMM.
    std::vector<uint16_t> xb(static_cast<size_t>(n_tok) * n_in);  // [n_tok, n_in] bf16 bits
    pool.parallel_for(static_cast<size_t>(n_tok) * n_in, 4096, [&](size_t begin, size_t end, int) {
      for (size_t i = begin; i < end; ++i) xb[i] = fp32_to_bf16(x[i]);
    });
    const PackedGemmBf16Fn gemm = packed_gemm_bf16_kernel(detected_isa());
    const PackedView view = w.packed->view();
    const size_t n_groups = static_cast<size_t>(w.packed->n_groups());
    pool.parallel_for_dynamic(n_groups, dynamic_chunk(pool, n_groups), [&](size_t begin, size_t end, int) {
      gemm(view, xb.data(), n_tok, y, n_out, static_cast<int64_t>(begin), static_cast<int64_t>(end));
    });
    return;
  }
  if (packed_q8(w)) {
    float* const outputs[1] = {y};
    return packed_q8_gemm(pool, std::span<const WeightMatrix>(&w, 1), x, outputs, n_tok);
  }
  if (const DotQ8Fn dot_q8 = dot_q8_kernel(w.type)) {
    // Quantized weights: activations to 8-bit blocks once, then integer dots. Rows are walked in tiles
    // and tokens in groups of kDotQ8MaxTokens, so each weight row is decoded once per token group.
    const size_t nb = n_in / 32;
    const std::vector<BlockQ8A> xq = quantize_rows(pool, x, n_in, n_tok);  // [n_tok, n_in / 32]
    pool.parallel_for(n_out, kRowTile, [&](size_t begin, size_t end, int) {
      for (size_t r0 = begin; r0 < end; r0 += kRowTile) {
        const size_t r1 = std::min<size_t>(end, r0 + kRowTile);
        for (int t0 = 0; t0 < n_tok; t0 += kDotQ8MaxTokens) {
          const int nt = std::min(kDotQ8MaxTokens, n_tok - t0);
          for (size_t r = r0; r < r1; ++r)
            dot_q8(w.row(static_cast<int64_t>(r)), xq.data() + t0 * nb, nb, nt, n_in, y + t0 * n_out + r, n_out);
        }
      }
    });
    return;
  }
  if (n_tok <= kDirectMaxTokens || w.type == DType::F32) {
    const DotFn dot = dot_kernel(w.type);
    pool.parallel_for(n_out, 8, [&](size_t begin, size_t end, int) {
      for (size_t r = begin; r < end; ++r) {
        const uint8_t* row = w.row(static_cast<int64_t>(r));
        for (int t = 0; t < n_tok; ++t) y[t * n_out + r] = dot(row, x + t * n_in, n_in);
      }
    });
    return;
  }
  const DotFn dot_f32 = dot_kernel(DType::F32);
  pool.parallel_for(n_out, kRowTile, [&](size_t begin, size_t end, int) {
    std::vector<float> tile(static_cast<size_t>(kRowTile) * n_in);  // [kRowTile, n_in] decoded rows
    for (size_t r0 = begin; r0 < end; r0 += kRowTile) {
      const size_t rows = std::min<size_t>(kRowTile, end - r0);
      for (size_t r = 0; r < rows; ++r)
        dequantize_row(w.type, w.row(static_cast<int64_t>(r0 + r)), tile.data() + r * n_in, n_in);
      for (int t = 0; t < n_tok; ++t) {
        const float* xt = x + t * n_in;
        float* yt = y + t * n_out + r0;
        for (size_t r = 0; r < rows; ++r) yt[r] = dot_f32(tile.data() + r * n_in, xt, n_in);
      }
    }
  });
}

}  // namespace kestrel::ops
