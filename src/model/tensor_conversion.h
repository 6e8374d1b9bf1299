// What the two model quantizers (model/model_quantizer.h, model/w8a8_quantizer.h) and the AWQ fold share:
// the float rows a tensor is converted from, row-parallel conversion with its relative error, the facts the
// per-tensor rules read from a file's metadata, the metadata copy of a quantized file, and the tie of the
// attention output's input channels to V's rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "quant/importance_matrix.h"
#include "quant/recipe.h"

namespace kestrel {

inline bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The float rows a tensor is converted from: the file's, or new contents (an AWQ or SmoothQuant fold).
struct SourceRows {
  const TensorView& t;
  const std::vector<float>* replaced = nullptr;  // [n_elements] or null
  // dst[t.ne[0]] <- row r.
  void row(int64_t r, float* dst) const;
};

// Sums of squared conversion error and of squared source, per thread: the relative RMS error of a tensor.
class ErrorSums {
 public:
  explicit ErrorSums(int n_threads) : err_(static_cast<size_t>(n_threads), 0.0), ref_(err_.size(), 0.0) {}
  // Called by thread `thread` only.
  void add(int thread, const float* source, const float* back, size_t n);
  double relative() const;  // sqrt(sum err / sum source^2), 0 for an all-zero source

 private:
  std::vector<double> err_, ref_;  // [threads]
};

// Converts every row of src to `to` into out [n_rows][row_bytes(to, ne[0])], on the pool: each row by
// quantize_row_weighted with its slice's importance where `importance` is given; without one, K-quants by
// the same search with equal weights (as llama.cpp's reference K-quantizers search each sub-block's scale
// and offset) and the other types by quantize_row.
void convert_rows(const SourceRows& src, DType to, uint8_t* out, const ImportanceMatrix* importance, ThreadPool& pool);

// RMS of (converted - source) / RMS of source over all rows of out (src converted to `to`).
double relative_error(const SourceRows& src, DType to, const uint8_t* out, ThreadPool& pool);

// `arch.key` of the file's architecture as an integer (0 where absent), e.g. "attention.head_count".
int64_t arch_metadata_int(const GgufFile& file, const std::string& key);

// The same for layer `layer` of a per-layer key (an integer, or an array with one per layer).
int64_t arch_layer_int(const GgufFile& file, const std::string& key, int layer);

// What the per-tensor rules need, from the file's metadata and tensors.
QuantModelFacts quant_model_facts(const GgufFile& file);

// Every key of `in` into w, with general.file_type set to `file_type` and ggml's quantization version.
void copy_metadata_for_quantized(const GgufFile& in, GgufWriter& w, uint32_t file_type);

// For the attention output projection with n_head heads of hd dims over n_kv_head KV heads: channel c reads
// V's row tie[c] (heads of one KV group share V's rows, so folds through V must scale them alike).
// [n_head * hd]
std::vector<int64_t> attention_output_tie(int64_t n_head, int64_t n_kv_head, int64_t hd);

}  // namespace kestrel
