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
#include "model/calibration.h"
#include "quant/gptq.h"
#include "quant/recipe.h"

namespace kestrel {

struct QuantizeOptions {
  std::string input, output;
  QuantScheme scheme;
  bool pure = false;  // every quantized tensor of the scheme's base type (llama.cpp's --pure)
  // With an importance matrix, each block's scales are searched for the least importance-weighted error
  // (quant/importance_quantize.h; tensors it has no entry for get the search with equal weights); without
  // one, round to nearest (quant/quantize.h).
  const ImportanceMatrix* importance = nullptr;
  // With Hessians, every block-format tensor slice that has one is quantized by GPTQ (quant/gptq.h), which
  // takes its importance from H's diagonal; other tensors as above.
  const HessianSet* hessians = nullptr;
  GptqOptions gptq{};
};

// How a tensor was converted.
enum class QuantMethod { Copy, RoundToNearest, Importance, Gptq };
const char* quant_method_name(QuantMethod method);

// One tensor of the written file.
struct TensorQuantReport {
  std::string name;
  std::string shape;
  DType from, to;
  size_t bytes_in = 0, bytes_out = 0;
  bool converted = false;   // false: copied unchanged
  QuantMethod method = QuantMethod::Copy;
  double rel_error = 0.0;   // converted: RMS of (dequantized - source) / RMS of source
};

struct QuantizeReport {
  std::vector<TensorQuantReport> tensors;  // in file order
  size_t bytes_in = 0, bytes_out = 0;      // tensor data
  int64_t converted_weights = 0;
  size_t converted_bytes_out = 0;
  // Bits per weight over the converted tensors.
  double bits_per_weight() const {
    return converted_weights ? 8.0 * static_cast<double>(converted_bytes_out) / static_cast<double>(converted_weights) : 0.0;
  }
};

// Errors: the input cannot be read, GPTQ fails on a tensor (a Hessian that is not positive definite), a tensor the scheme converts is already quantized to another type
// (requantizing compounds the error: start from an F32, F16 or BF16 file), or the output cannot be written.
// progress(fraction of the input's tensor bytes done) may be empty.
Result<QuantizeReport> quantize_model(const QuantizeOptions& options, ThreadPool& pool,
                                      const std::function<void(double)>& progress = {});

}  // namespace kestrel
