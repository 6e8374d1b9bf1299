// Matrix multiplication against weight rows of any supported type (see docs/compute.md for the paths):
// packed integer or BF16 GEMM, integer row dots, float row dots, and for many float tokens a tile of
// decoded rows that the tokens stream past.
#include <algorithm>
#include <vector>

#include "compute/cpu/dot.h"
#include "compute/cpu/elementwise.h"
#include "compute/cpu/packed_matrix.h"
#include "compute/cpu/packed_sparse24.h"
#include "compute/cpu/task_grain.h"
#include "compute/cpu/w8a8_gemm.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "quant/quantize.h"

namespace kestrel::ops {
namespace {
constexpr int kDirectMaxTokens = 4;  // up to this many tokens, dot the encoded rows directly
constexpr int64_t kRowTile = 16;     // rows decoded together for prefill
constexpr int kQuantizeInPassTokens = 8;  // up to this many tokens, each GEMM thread quantizes the input

bool packed_q8(const WeightMatrix& w) { return w.packed && packed_layout_is_integer(w.packed->layout); }

// GEMM threads walk their own contiguous share of the row groups and steal from each other's when done
// (ThreadPool::parallel_for_dynamic), down to one group (or as many as make a task: task_grain.h), so a
// thread whose core is also busy does less of the GEMM and both finish together. matrices: how many
// matrices' groups a take covers at once (matmul_swiglu's gate and up).
size_t groups_per_take(const PackedMatrix& p, int n_tok, size_t matrices = 1) {
  return grain_for_macs(matrices * PackedMatrix::kRows * static_cast<size_t>(p.n_in) * static_cast<size_t>(n_tok));
}

// xq[n_in / 32] <- one input row, RMS-normalised first when in.norm_weight is set.
void quantize_input_row(const MatmulInput& in, size_t t, size_t n_in, BlockQ8A* xq) {
  const float* row = in.x + t * n_in;
  if (in.norm_weight) return quantize_norm_q8a_kernel(detected_isa())(row, in.norm_weight, in.norm_eps, xq, n_in);
  quantize_q8a_kernel(detected_isa())(row, xq, n_in);
}

// xq[n_tok, n_in / 32] <- in[n_tok, n_in], whole tokens per task.
std::vector<BlockQ8A> quantize_rows(ThreadPool& pool, const MatmulInput& in, size_t n_in, int n_tok) {
  const size_t nb = n_in / 32;
  std::vector<BlockQ8A> xq(static_cast<size_t>(n_tok) * nb);
  pool.parallel_for(static_cast<size_t>(n_tok), grain_for_macs(n_in), [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) quantize_input_row(in, t, n_in, xq.data() + t * nb);
  });
  return xq;
}

// The 8-bit input blocks [n_tok, n_in / 32] the threads of one packed pass read. For many tokens they are
// quantized once up front; for a few (decode) each thread normalises and quantizes the input itself on
// its first chunk, which costs less than a separate parallel pass whose single task would leave the other
// threads waiting.
class PassInput {
 public:
  PassInput(ThreadPool& pool, const MatmulInput& in, size_t n_in, int n_tok)
      : in_(in), n_in_(n_in), n_tok_(n_tok), in_pass_(n_tok <= kQuantizeInPassTokens),
        shared_(in_pass_ ? std::vector<BlockQ8A>() : quantize_rows(pool, in, n_in, n_tok)),
        own_(in_pass_ ? pool.n_threads() : 0) {}

  // Called by thread `thread` inside the pass.
  const BlockQ8A* for_thread(int thread) {
    if (!in_pass_) return shared_.data();
    std::vector<BlockQ8A>& own = own_[static_cast<size_t>(thread)];
    if (own.empty()) {
      const size_t nb = n_in_ / 32;
      own.resize(static_cast<size_t>(n_tok_) * nb);
      for (size_t t = 0; t < static_cast<size_t>(n_tok_); ++t) quantize_input_row(in_, t, n_in_, own.data() + t * nb);
    }
    return own.data();
  }

 private:
  MatmulInput in_;
  size_t n_in_;
  int n_tok_;
  bool in_pass_;
  std::vector<BlockQ8A> shared_;          // [n_tok, n_in / 32] when quantized up front
  std::vector<std::vector<BlockQ8A>> own_;  // per thread [n_tok, n_in / 32] when quantized in the pass
};

// y[n_tok, p.n_out] rows of groups [begin, end) of one packed matrix; `next`: the bytes the thread streams
// after them (see PackedView::next).
void packed_groups(const PackedMatrix& p, const BlockQ8A* xq, int n_tok, float* y, size_t begin, size_t end,
                   const uint8_t* next, bool accumulate = false) {
  packed_gemm_kernel(p.layout, detected_isa())(p.view(next, accumulate), xq, n_tok, y, static_cast<size_t>(p.n_out),
                                               static_cast<int64_t>(begin), static_cast<int64_t>(end));
}

// Packed integer GEMM for matrices sharing one input: the input is quantized once, and one parallel pass
// walks the row groups of all matrices, so the threads meet once instead of once per matrix.
// accumulate: ys[i] += the products instead.
void packed_q8_gemm(ThreadPool& pool, std::span<const WeightMatrix> ws, const MatmulInput& in,
                    std::span<float* const> ys, int n_tok, bool accumulate = false) {
  PassInput input(pool, in, static_cast<size_t>(ws[0].n_in), n_tok);
  std::vector<size_t> first_group(ws.size() + 1, 0);  // [n_matrices + 1] prefix sums of group counts
  for (size_t i = 0; i < ws.size(); ++i) first_group[i + 1] = first_group[i] + static_cast<size_t>(ws[i].packed->n_groups());
  pool.parallel_for_dynamic(first_group.back(), groups_per_take(*ws[0].packed, n_tok), [&](size_t begin, size_t end, int thread) {
    const BlockQ8A* xq = input.for_thread(thread);
    for (size_t i = 0; i < ws.size(); ++i) {
      const size_t b = std::max(begin, first_group[i]), e = std::min(end, first_group[i + 1]);
      if (b >= e) continue;
      const uint8_t* next_matrix = i + 1 < ws.size() ? ws[i + 1].packed->data.get() : nullptr;
      packed_groups(*ws[i].packed, xq, n_tok, ys[i], b - first_group[i], e - first_group[i],
                    ws[i].packed->after_group(static_cast<int64_t>(e - first_group[i]), next_matrix), accumulate);
    }
  });
}

// in's rows as plain floats: x itself, or its normalised copy in `normed` [n_tok, n_in].
const float* plain_input(ThreadPool& pool, const MatmulInput& in, size_t n_in, int n_tok, std::vector<float>& normed) {
  if (!in.norm_weight) return in.x;
  normed.resize(static_cast<size_t>(n_tok) * n_in);
  rmsnorm(pool, in.x, in.norm_weight, normed.data(), n_tok, static_cast<int>(n_in), in.norm_eps);
  return normed.data();
}

// y[n_tok, w.n_out] = (or +=) x[n_tok, w.n_in] . W^T through a float packed layout: F16/BF16 weights
// packed as BF16 (activations to BF16 once, then the BF16 dot-product GEMM), or widened in registers
// (dense or 2:4), or F32 weights (float activations as they are). Where the packed shape is padded
// (packed_matrix.h) the activations get zero inputs and the padding rows land in a scratch.
void packed_float_gemm(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok, bool add_into_y) {
  const PackedMatrix& p = *w.packed;
  const size_t n_in = static_cast<size_t>(p.n_in), n_out = static_cast<size_t>(p.n_out), tokens = static_cast<size_t>(n_tok);
  std::vector<float> x_padded, y_padded;  // [n_tok, n_in], [n_tok, n_out] at the packed shape when it is padded
  if (p.n_in != w.n_in) {
    x_padded.assign(tokens * n_in, 0.0f);
    for (size_t t = 0; t < tokens; ++t) std::copy_n(x + t * static_cast<size_t>(w.n_in), w.n_in, x_padded.data() + t * n_in);
    x = x_padded.data();
  }
  float* out = y;
  if (p.n_out != w.n_out) {
    y_padded.resize(tokens * n_out);
    out = y_padded.data();
  }
  const bool add_in_kernel = add_into_y && out == y;
  if (p.layout == PackedLayout::BF16x16) {
    std::vector<uint16_t> xb(tokens * n_in);  // [n_tok, n_in] bf16 bits
    pool.parallel_for(tokens * n_in, 4096, [&](size_t begin, size_t end, int) {
      for (size_t i = begin; i < end; ++i) xb[i] = fp32_to_bf16(x[i]);
    });
    const PackedGemmBf16Fn gemm = packed_gemm_bf16_kernel(detected_isa());
    pool.parallel_for_dynamic(static_cast<size_t>(p.n_groups()), groups_per_take(p, n_tok), [&](size_t begin, size_t end, int) {
      gemm(p.view(p.after_group(static_cast<int64_t>(end), nullptr), add_in_kernel), xb.data(), n_tok, out, n_out,
           static_cast<int64_t>(begin), static_cast<int64_t>(end));
    });
  } else {
    const PackedGemmF32Fn gemm = packed_gemm_f32_kernel(p.layout, detected_isa());
    // The 2:4 F16 kernel with tokens in the lanes transposes the activations on every call: takes of at
    // least an eighth of a thread's share (AVX2 pp512: 1.17x dense F16 with one-group takes, 1.28x so).
    size_t grain = groups_per_take(p, n_tok);
    if (p.layout == PackedLayout::S24_F16x16 && n_tok >= kSparse24F16LaneTokens)
      grain = std::max(grain, static_cast<size_t>(p.n_groups()) / (8 * static_cast<size_t>(pool.n_threads())));
    pool.parallel_for_dynamic(static_cast<size_t>(p.n_groups()), grain, [&](size_t begin, size_t end, int) {
      gemm(p.view(p.after_group(static_cast<int64_t>(end), nullptr), add_in_kernel), x, n_tok, out, n_out,
           static_cast<int64_t>(begin), static_cast<int64_t>(end));
    });
  }
  if (out == y) return;
  const size_t w_out = static_cast<size_t>(w.n_out);
  for (size_t t = 0; t < tokens; ++t) {
    const float* row = out + t * n_out;
    float* dst = y + t * w_out;
    if (add_into_y) add(dst, row, w_out);
    else std::copy_n(row, w_out, dst);
  }
}

}  // namespace

void matmul_many(ThreadPool& pool, std::span<const WeightMatrix> ws, const MatmulInput& in, std::span<float* const> ys,
                 int n_tok) {
  bool fused = !ws.empty();
  for (const WeightMatrix& w : ws) fused = fused && packed_q8(w) && w.n_in == ws[0].n_in;
  if (fused) return packed_q8_gemm(pool, ws, in, ys, n_tok);
  if (ws.empty()) return;
  std::vector<float> normed;  // [n_tok, n_in] when in is normalised
  const float* x = plain_input(pool, in, static_cast<size_t>(ws[0].n_in), n_tok, normed);
  for (size_t i = 0; i < ws.size(); ++i) matmul(pool, ws[i], x, ys[i], n_tok);
}

void matmul_swiglu(ThreadPool& pool, const WeightMatrix& gate, const WeightMatrix& up, const MatmulInput& in,
                   float* gate_out, float* up_out, int n_tok) {
  const size_t n_ff = static_cast<size_t>(gate.n_out);
  if (!(packed_q8(gate) && packed_q8(up) && up.n_out == gate.n_out && up.n_in == gate.n_in)) {
    const WeightMatrix ws[] = {gate, up};
    float* const ys[] = {gate_out, up_out};
    matmul_many(pool, ws, in, ys, n_tok);
    return silu_mul(pool, gate_out, up_out, static_cast<size_t>(n_tok) * n_ff);
  }
  // One pass over pairs of row groups: a thread computes gate and up rows of the same groups, then applies
  // the activation to them while they are in cache, so no separate elementwise pass (and barrier) follows.
  PassInput input(pool, in, static_cast<size_t>(gate.n_in), n_tok);
  const SiluMulFn silu_mul_rows = silu_mul_kernel(detected_isa());
  const size_t rows = PackedMatrix::kRows;
  pool.parallel_for_dynamic(static_cast<size_t>(gate.packed->n_groups()), groups_per_take(*gate.packed, n_tok, 2),
                            [&](size_t begin, size_t end, int thread) {
                              const BlockQ8A* xq = input.for_thread(thread);
                              // gate's groups stream on into up's, and up's into gate's next groups
                              const auto b = static_cast<int64_t>(begin), e = static_cast<int64_t>(end);
                              packed_groups(*gate.packed, xq, n_tok, gate_out, begin, end, up.packed->block(b, 0));
                              packed_groups(*up.packed, xq, n_tok, up_out, begin, end, gate.packed->after_group(e, nullptr));
                              for (size_t t = 0; t < static_cast<size_t>(n_tok); ++t)
                                silu_mul_rows(gate_out + t * n_ff + begin * rows, up_out + t * n_ff + begin * rows,
                                              (end - begin) * rows);
                            });
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok, Accumulate accumulate) {
  const size_t n_in = static_cast<size_t>(w.n_in);
  const size_t n_out = static_cast<size_t>(w.n_out);
  const bool add_into_y = accumulate == Accumulate::Yes;
  if (w.type == DType::I8) return matmul_w8a8(pool, w, x, y, n_tok, add_into_y);
  if (w.packed && !packed_layout_is_integer(w.packed->layout)) return packed_float_gemm(pool, w, x, y, n_tok, add_into_y);
  if (packed_q8(w)) {
    float* const outputs[1] = {y};
    return packed_q8_gemm(pool, std::span<const WeightMatrix>(&w, 1), MatmulInput{x}, outputs, n_tok, add_into_y);
  }
  if (add_into_y) {  // the row-dot paths write their rows: into a scratch, then added
    std::vector<float> product(static_cast<size_t>(n_tok) * n_out);  // [n_tok, n_out]
    matmul(pool, w, x, product.data(), n_tok);
    return add(y, product.data(), product.size());
  }
  if (const DotQ8Fn dot_q8 = dot_q8_kernel(w.type)) {
    // Quantized weights: activations to 8-bit blocks once, then integer dots. Rows are walked in tiles
    // and tokens in groups of kDotQ8MaxTokens, so each weight row is decoded once per token group.
    const size_t nb = n_in / 32;
    const std::vector<BlockQ8A> xq = quantize_rows(pool, MatmulInput{x}, n_in, n_tok);  // [n_tok, n_in / 32]
    pool.parallel_for(n_out, grain_for_macs(n_in * static_cast<size_t>(n_tok), static_cast<size_t>(kRowTile)), [&](size_t begin, size_t end, int) {
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
    pool.parallel_for(n_out, grain_for_macs(n_in * static_cast<size_t>(n_tok), 8), [&](size_t begin, size_t end, int) {
      for (size_t r = begin; r < end; ++r) {
        const uint8_t* row = w.row(static_cast<int64_t>(r));
        for (int t = 0; t < n_tok; ++t) y[t * n_out + r] = dot(row, x + t * n_in, n_in);
      }
    });
    return;
  }
  const DotFn dot_f32 = dot_kernel(DType::F32);
  pool.parallel_for(n_out, grain_for_macs(n_in * static_cast<size_t>(n_tok), static_cast<size_t>(kRowTile)), [&](size_t begin, size_t end, int) {
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
