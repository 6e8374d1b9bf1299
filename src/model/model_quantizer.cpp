#include "model/model_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "io/gguf.h"
#include "model/embedding_importance.h"
#include "model/tensor_conversion.h"
#include "model/w8a8_quantizer.h"
#include "quant/block_grid.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

// AWQ's scaled matrices: the clip search on the groups' Hessians where the fold has them, else the
// importance search with the scaled inputs' importance.
void convert_awq(const SourceRows& src, DType to, uint8_t* out, const AwqFold& fold, ThreadPool& pool) {
  const auto blocks = fold.group_hessians.find(src.t.name);
  if (blocks == fold.group_hessians.end()) {
    convert_rows(src, to, out, &fold.importance, pool);
    return;
  }
  const size_t n = static_cast<size_t>(src.t.ne[0]), out_row = row_bytes(to, n);
  const float* importance = fold.importance.find(src.t.name, 0);
  pool.parallel_for_dynamic(static_cast<size_t>(src.t.n_rows()), 1, [&](size_t begin, size_t end, int) {
    std::vector<float> x(n);  // [n] a source row
    for (size_t r = begin; r < end; ++r) {
      src.row(static_cast<int64_t>(r), x.data());
      awq_clip_quantize_row(to, x.data(), out + r * out_row, n, blocks->second->data(), importance);
    }
  });
}

// GPTQ of every slice of t that has a Hessian (the others by the importance search with equal weights).
Status convert_gptq(const SourceRows& src, DType to, uint8_t* out, const HessianSet& hessians, const GptqOptions& options,
                    ThreadPool& pool) {
  const TensorView& t = src.t;
  const int64_t n_in = t.ne[0], n_out = t.ne[1];
  const size_t out_slice = row_bytes(to, static_cast<size_t>(n_in)) * static_cast<size_t>(n_out);
  std::vector<float> w(static_cast<size_t>(n_in * n_out));  // [n_out][n_in] one slice
  for (int64_t s = 0; s < t.n_rows() / n_out; ++s) {
    for (int64_t r = 0; r < n_out; ++r) src.row(s * n_out + r, w.data() + r * n_in);
    uint8_t* dst = out + static_cast<size_t>(s) * out_slice;
    if (const HessianSet::Hessian* h = hessians.find(t.name, s)) {
      if (Status done = gptq_quantize(to, w.data(), n_out, n_in, h->h.data(), options, dst, pool); !done.ok())
        return Error{"tensor '" + t.name + "': " + done.error()};
    } else {
      for (int64_t r = 0; r < n_out; ++r)
        quantize_row_weighted(to, w.data() + r * n_in, dst + static_cast<size_t>(r) * row_bytes(to, static_cast<size_t>(n_in)),
                              static_cast<size_t>(n_in), nullptr);
    }
  }
  return Status{};
}

}  // namespace

const char* quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::Copy: return "copy";
    case QuantMethod::RoundToNearest: return "rtn";
    case QuantMethod::Importance: return "imatrix";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::Awq: return "awq";
    case QuantMethod::W8A8: return "w8a8";
    case QuantMethod::SmoothQuant: return "smoothquant";
  }
  return "?";
}

Result<QuantizeReport> quantize_model(const QuantizeOptions& options, ThreadPool& pool,
                                      const std::function<void(double)>& progress) {
  if (options.scheme.base == DType::I8) return quantize_model_w8a8(options, pool, progress);
  auto opened = GgufFile::open(options.input);
  if (!opened.ok()) return Error{opened.error()};
  const GgufFile& in = opened.value();
  const QuantModelFacts facts = quant_model_facts(in);
  const bool needs_hessians = options.method == QuantMethod::Gptq || options.method == QuantMethod::Awq;
  if ((needs_hessians && !options.hessians) || (options.method == QuantMethod::Importance && !options.importance))
    return Error{std::string("quantizing by ") + quant_method_name(options.method) + " needs calibration data"};

  // The calibrated methods weight the embedding's rounding by the norms that read it.
  ImportanceMatrix importance;
  if (options.importance) {
    importance = *options.importance;
    if (Status added = add_embedding_importance(in, importance); !added.ok()) return Error{added.error()};
  }
  const ImportanceMatrix* importance_used = options.importance ? &importance : nullptr;

  QuantizeReport report;
  GgufWriter w;
  copy_metadata_for_quantized(in, w, options.scheme.file_type);
  for (const TensorView& t : in.tensors()) {
    std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
    TensorQuantReport r{t.name, t.shape_string(), t.type, t.type, t.n_bytes, t.n_bytes, false, QuantMethod::Copy, 0.0};
    if (const auto to = quant_tensor_type(options.scheme, options.pure, t.name, dims, facts); to && *to != t.type) {
      if (!is_float_type(t.type))
        return Error{"tensor '" + t.name + "' is already " + dtype_name(t.type) + ": quantizing it to " + dtype_name(*to) +
                     " would compound the error; start from an F32, F16 or BF16 file"};
      r.to = *to;
      r.converted = true;
      const bool gptq = options.method == QuantMethod::Gptq && has_block_grid(*to) && options.hessians->find(t.name, 0);
      r.method = gptq ? QuantMethod::Gptq
                 : importance_used && importance_used->find(t.name, 0) ? QuantMethod::Importance
                                                                       : QuantMethod::RoundToNearest;
    }
    const size_t index = w.add_tensor(t.name, r.to, dims);
    r.bytes_out = w.tensor_bytes(index);
    report.bytes_in += r.bytes_in;
    report.bytes_out += r.bytes_out;
    if (r.converted) {
      report.converted_weights += t.n_elements();
      report.converted_bytes_out += r.bytes_out;
    }
    report.tensors.push_back(r);
  }

  AwqFold fold;
  if (options.method == QuantMethod::Awq) {
    std::unordered_map<std::string, DType> converted_to;  // converted tensor -> its type
    for (const TensorQuantReport& r : report.tensors)
      if (r.converted) converted_to.emplace(r.name, r.to);
    const auto target = [&](const std::string& name) -> std::optional<DType> {
      const auto it = converted_to.find(name);
      return it == converted_to.end() ? std::nullopt : std::optional<DType>(it->second);
    };
    auto folded = awq_fold(in, *options.hessians, target, options.awq, pool);
    if (!folded.ok()) return Error{folded.error()};
    fold = std::move(folded).value();
    report.awq_groups = fold.groups;
    for (TensorQuantReport& r : report.tensors)
      if (r.converted && fold.importance.find(r.name, 0)) r.method = QuantMethod::Awq;
  }

  size_t done = 0;
  Status failed;
  const Status written = w.write(
      options.output,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        const TensorView& t = in.tensors()[i];
        TensorQuantReport& r = report.tensors[i];
        const auto replaced = fold.tensors.find(t.name);
        const SourceRows src{t, replaced == fold.tensors.end() ? nullptr : &replaced->second};
        if (r.method == QuantMethod::Gptq) {
          if (Status s = convert_gptq(src, r.to, bytes.data(), *options.hessians, options.gptq, pool); !s.ok() && failed.ok()) failed = s;
        } else if (r.converted) {
          if (r.method == QuantMethod::Awq) convert_awq(src, r.to, bytes.data(), fold, pool);
          else convert_rows(src, r.to, bytes.data(), importance_used, pool);
        } else if (src.replaced) {
          convert_rows(src, t.type, bytes.data(), nullptr, pool);  // a folded norm weight or bias, in its own type
        } else {
          std::memcpy(bytes.data(), t.data, t.n_bytes);
        }
        if (r.converted) r.rel_error = relative_error(src, r.to, bytes.data(), pool);
        done += t.n_bytes;
        if (progress) progress(report.bytes_in ? static_cast<double>(done) / static_cast<double>(report.bytes_in) : 1.0);
      },
      in.alignment());
  if (!failed.ok()) {
    std::filesystem::remove(options.output);
    return Error{failed.error()};
  }
  if (!written.ok()) return Error{written.error()};
  return report;
}

}  // namespace kestrel
