// Writes a model file quantized to a scheme (`kestrel quantize`): every tensor the scheme's rules pick
// (quant/recipe.h) is converted from its float type (F32, F16, BF16) row by row on the pool's threads;
// everything else, metadata included, is copied as it is, and general.file_type names the scheme. The
// result is an ordinary GGUF file of standard types that any GGUF reader loads.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/awq_fold.h"
#include "model/calibration.h"
#include "quant/awq.h"
#include "quant/gptq.h"
#include "quant/recipe.h"

namespace kestrel {

// How a tensor is converted.
enum class QuantMethod {
  Copy,            // not converted
  RoundToNearest,  // quant/quantize.h; K-quants: their sub-block scales searched with equal weights
  Importance,      // scales searched for the least importance-weighted error (quant/importance_quantize.h)
  Gptq,            // error compensation through the inverse Hessian (quant/gptq.h)
  Awq,             // activation-aware channel scales folded into the model, then rounded (model/awq_fold.h)
  W8A8,            // int8 rows with per-row scales, inputs quantized to int8 too (model/w8a8_quantizer.h)
  SmoothQuant,     // W8A8 after SmoothQuant's migration of activation outliers into the weights
};
const char* quant_method_name(QuantMethod method);

struct QuantizeOptions {
  std::string input, output;
  QuantScheme scheme;
  bool pure = false;  // every quantized tensor of the scheme's base type (llama.cpp's --pure)
  // RoundToNearest, Importance (needs `importance`), Gptq or Awq (need `hessians`). Tensors the method
  // does not reach get the importance search where `importance` is given (with equal weights where it has
  // no entry), else round to nearest: GPTQ handles block formats with a Hessian, AWQ the matrices of the
  // groups it folds. Where `importance` is given and has no entry for the token embedding, the embedding
  // gets one from the norms that read it (model/embedding_importance.h).
  QuantMethod method = QuantMethod::RoundToNearest;
  const ImportanceMatrix* importance = nullptr;
  const HessianSet* hessians = nullptr;
  GptqOptions gptq{};
  AwqOptions awq{};
  // The W8A8 scheme (model/w8a8_quantizer.h).
  float smooth_alpha = -1.0f;      // SmoothQuant's migration strength (0.5 is the paper's); < 0: none
  float outlier_threshold = 0.0f;  // > 0: channels whose calibrated max|x_j| reaches it x the median stay in F16
  bool static_scales = false;      // calibrated activation scale per matrix instead of per token
};

// One tensor of the written file.
struct TensorQuantReport {
  std::string name;
  std::string shape;
  DType from, to;
  size_t bytes_in = 0, bytes_out = 0;
  bool converted = false;   // false: copied unchanged
  QuantMethod method = QuantMethod::Copy;
  double rel_error = 0.0;   // converted: RMS of (dequantized - source) / RMS of source (AWQ: the scaled source)
};

struct QuantizeReport {
  std::vector<TensorQuantReport> tensors;  // in file order
  std::vector<AwqGroupReport> awq_groups;  // with AWQ: each group's alpha and scored error
  size_t bytes_in = 0, bytes_out = 0;      // tensor data
  int64_t converted_weights = 0;
  size_t converted_bytes_out = 0;
  // Bits per weight over the converted tensors.
  double bits_per_weight() const {
    return converted_weights ? 8.0 * static_cast<double>(converted_bytes_out) / static_cast<double>(converted_weights) : 0.0;
  }
};

// Errors: the input cannot be read, the method lacks its calibration data, GPTQ fails on a tensor (a Hessian
// that is not positive definite), a tensor the scheme converts is already quantized to another type
// (requantizing compounds the error: start from an F32, F16 or BF16 file), or the output cannot be written.
// progress(fraction of the input's tensor bytes done) may be empty.
Result<QuantizeReport> quantize_model(const QuantizeOptions& options, ThreadPool& pool,
                                      const std::function<void(double)>& progress = {});

}  // namespace kestrel
