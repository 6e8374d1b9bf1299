// The op list: what model code calls. Architectures never include SIMD headers; these functions
// dispatch once to the kernels for the running CPU. Buffers are row-major with the shape given
// outermost first in each comment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compute/kv_layer_view.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace kestrel {

struct PackedMatrix;

// What an int8 weight matrix (DType::I8) multiplies with: W8A8, 8-bit weights times 8-bit activations.
// Weight row r is q[r][i] * row_scale[r]. Each input row is quantized to int8 with one scale: its own
// max|x| / 127 (dynamic, per token) or the calibrated input_scale (static; values beyond it clamp to
// +-127). The outlier channels (LLM.int8's decomposition) are left out of the 8-bit product: their weight
// columns are zero in q, kept in F16 in outlier_weight, and multiplied with the float inputs.
struct Int8Scales {
  const float* row_scale = nullptr;          // [n_out]
  float input_scale = 0.0f;                  // static activation scale; 0: per-token dynamic
  std::span<const int32_t> outlier_channels;  // [k] ascending input channels < n_in
  const uint16_t* outlier_weight = nullptr;  // [n_out, k] F16
};

// A weight matrix: n_out rows of n_in elements of `type` (a 2-D tensor, or one expert of a 3-D one),
// optionally with a copy repacked for the integer GEMM kernels (then used instead of `data`).
struct WeightMatrix {
  DType type = DType::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  const PackedMatrix* packed = nullptr;
  const Int8Scales* int8 = nullptr;  // set for (and only for) DType::I8

  static WeightMatrix from(const TensorView& t, int64_t expert = 0);
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Weight matrices repacked for this CPU's kernels (layouts in compute/cpu/packed_matrix.h, chosen by the
// detected ISA; the model sees only these entry points). A packed copy is used through WeightMatrix::packed.
// Whether a matrix of this type and shape gets a packed copy on this CPU.
bool has_packed_layout(DType type, int64_t n_in, int64_t n_out);
// The packed copy of w (nullptr when !has_packed_layout(...)).
std::shared_ptr<const PackedMatrix> pack_for_kernels(const WeightMatrix& w);

enum class RopeStyle {
  Interleaved,  // rotates pairs (x[2i], x[2i+1]) — GGUF llama files (Q/K rows permuted by the converter)
  NeoX,         // rotates pairs (x[i], x[i + n_rot/2]) — Qwen, GPT-NeoX
};

// What attention needs per query token: its position and its sequence's block table.
// Query token t attends to keys at positions 0..positions[t] of its sequence (causal).
struct AttentionRows {
  std::span<const int32_t> positions;             // [n_tok]
  std::span<const int32_t* const> block_tables;  // [n_tok] -> that sequence's block ids (one pointer per sequence)
};

namespace ops {

// The input rows of a projection: x [n_tok, n_in], RMS-normalised with norm_weight [n_in] first when it is
// set (x / rms(x) * norm_weight, as rmsnorm). Packed GEMMs fold the norm into quantizing the input, so a
// block's normalised input is never written out or read back.
struct MatmulInput {
  const float* x = nullptr;
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
};

// How a matmul puts its result into y: written, or added to what y holds (a block's output into the
// residual stream, done by the GEMM threads as they store their rows, not by a separate serial pass).
enum class Accumulate { No, Yes };

// y[n_tok, w.n_out] = x[n_tok, w.n_in] . W^T, or y += that with Accumulate::Yes
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, float* y, int n_tok,
            Accumulate accumulate = Accumulate::No);
// ys[i][n_tok, ws[i].n_out] = in[n_tok, n_in] . Ws[i]^T for matrices sharing one input (q/k/v, gate/up):
// the input is quantized once and all matrices run in one parallel pass.
void matmul_many(ThreadPool& pool, std::span<const WeightMatrix> ws, const MatmulInput& in, std::span<float* const> ys,
                 int n_tok);
// SwiGLU's projections: gate_out[n_tok, n_ff] = silu(in . G^T) * (in . U^T), with up_out [n_tok, n_ff] as
// scratch. For packed weights one parallel pass computes both and applies the activation row group by row
// group; otherwise matmul_many then silu_mul.
void matmul_swiglu(ThreadPool& pool, const WeightMatrix& gate, const WeightMatrix& up, const MatmulInput& in,
                   float* gate_out, float* up_out, int n_tok);

// y[n_tok, n] = x / rms(x) * weight[n]; y may alias x. The pool version splits the rows across threads.
void rmsnorm(const float* x, const float* weight, float* y, int n_tok, int n, float eps);
void rmsnorm(ThreadPool& pool, const float* x, const float* weight, float* y, int n_tok, int n, float eps);

// RoPE angles of a batch: pair i of token t turns by positions[t] * freq_base^(-2i/n_rot) / freq_factors[i]
// (freq_factors optional, [n_rot / 2]). Computed once per forward and shared by every layer and head.
struct RopeTable {
  int n_rot = 0;
  std::vector<float> cos, sin;  // [n_tok, n_rot / 2]
};
RopeTable rope_table(std::span<const int32_t> positions, int n_rot, float freq_base, const float* freq_factors = nullptr);

// Rotates the first table.n_rot dims of each head in place. x: [n_tok, n_heads, head_dim].
void rope(float* x, const RopeTable& table, int n_heads, int head_dim, RopeStyle style);

// x[n] += b[n] for each of n_tok rows (bias).
void add_bias(float* x, const float* b, int n_tok, int n);
// x[n] += y[n]
void add(float* x, const float* y, size_t n);
// gate[n] = silu(gate[n]) * up[n] (vector kernel per ISA; large n split across threads)
void silu_mul(ThreadPool& pool, float* gate, const float* up, size_t n);
// In-place softmax over n values.
void softmax(float* x, int n);

// The K/V rows of a batch's tokens to be written into their slots.
struct KvWrite {
  const float* k = nullptr;              // [n_tok, n_kv_heads, k_dim]
  const float* v = nullptr;              // [n_tok, n_kv_heads, v_dim], or null when V lives inside K
  const RopeTable* k_rope = nullptr;     // rotate K while writing it (optional)
  RopeStyle style = RopeStyle::Interleaved;
};

// Writes the K/V rows of n_tok tokens (w.k, w.v) into their slots; with w.k_rope, each K row is rotated
// (RoPE, w.style) as it is written, so w.k itself stays unrotated.
void kv_store(const KvLayerView& kv, const AttentionRows& rows, const KvWrite& w, int n_tok);

// Causal attention over the paged cache with an online softmax, one key block at a time; the score
// matrix is never materialised. q: [n_tok, n_heads, k_dim], out: [n_tok, n_heads, v_dim].
// GQA: query head h reads KV head h / (n_heads / n_kv_heads).
// With `write`, the batch's K/V rows are stored first (as kv_store). When every token's sequence is alone in
// the batch (decode), each thread stores the rows of the KV heads it then attends with, inside the same
// pass: the stores, whose slots come cold from memory, are split across the threads, and the lines they
// fill are already in the reading core's cache. Tokens of one sequence share one block table pointer.
void attention_paged(ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                     float* out, int n_tok, int n_heads, float scale, const KvWrite* write = nullptr);

}  // namespace ops
}  // namespace kestrel
