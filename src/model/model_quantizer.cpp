#include "model/model_quantizer.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/gguf.h"
#include "quant/block_grid.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The facts the rules need, from the file's metadata.
QuantModelFacts model_facts(const GgufFile& file) {
  QuantModelFacts facts;
  const auto arch = file.get_string("general.architecture");
  const std::string prefix = arch.ok() && arch.value() ? *arch.value() + "." : std::string();
  if (auto n = file.get_int(prefix + "block_count"); n.ok() && n.value()) facts.n_layers = static_cast<int>(*n.value());
  if (auto n = file.get_int(prefix + "expert_count"); n.ok() && n.value()) facts.n_expert = static_cast<int>(*n.value());
  facts.has_output = file.find_tensor("output.weight") != nullptr;
  return facts;
}

// Converts one tensor's rows from t.type to `to` into out, on the pool: each row by quantize_row_weighted
// with its slice's importance, or by quantize_row without one.
void convert_rows(const TensorView& t, DType to, uint8_t* out, const ImportanceMatrix* importance, ThreadPool& pool) {
  const size_t n = static_cast<size_t>(t.ne[0]), out_row = row_bytes(to, n);
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 1, [&](size_t begin, size_t end, int) {
    std::vector<float> src(n);  // [n] a source row
    for (size_t r = begin; r < end; ++r) {
      dequantize_row(t.type, t.row(static_cast<int64_t>(r)), src.data(), n);
      if (importance)
        quantize_row_weighted(to, src.data(), out + r * out_row, n, importance->find(t.name, static_cast<int64_t>(r) / t.ne[1]));
      else
        quantize_row(to, src.data(), out + r * out_row, n);
    }
  });
}

// GPTQ of every slice of t that has a Hessian (the others by the importance search with equal weights).
Status convert_gptq(const TensorView& t, DType to, uint8_t* out, const HessianSet& hessians, const GptqOptions& options,
                    ThreadPool& pool) {
  const int64_t n_in = t.ne[0], n_out = t.ne[1];
  const size_t out_slice = row_bytes(to, static_cast<size_t>(n_in)) * static_cast<size_t>(n_out);
  std::vector<float> w(static_cast<size_t>(n_in * n_out));  // [n_out][n_in] one slice
  for (int64_t s = 0; s < t.n_rows() / n_out; ++s) {
    for (int64_t r = 0; r < n_out; ++r) dequantize_row(t.type, t.row(s * n_out + r), w.data() + r * n_in, static_cast<size_t>(n_in));
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

// RMS of (converted - source) / RMS of source over all of t's rows.
double relative_error(const TensorView& t, DType to, const uint8_t* out, ThreadPool& pool) {
  const size_t n = static_cast<size_t>(t.ne[0]), out_row = row_bytes(to, n);
  std::vector<double> err(static_cast<size_t>(pool.n_threads()), 0.0), ref(err.size(), 0.0);  // [threads]
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 1, [&](size_t begin, size_t end, int thread) {
    std::vector<float> src(n), back(n);  // [n] a source row, and the converted row decoded again
    for (size_t r = begin; r < end; ++r) {
      dequantize_row(t.type, t.row(static_cast<int64_t>(r)), src.data(), n);
      dequantize_row(to, out + r * out_row, back.data(), n);
      for (size_t i = 0; i < n; ++i) {
        err[static_cast<size_t>(thread)] += (back[i] - src[i]) * static_cast<double>(back[i] - src[i]);
        ref[static_cast<size_t>(thread)] += src[i] * static_cast<double>(src[i]);
      }
    }
  });
  double e = 0, s = 0;
  for (size_t i = 0; i < err.size(); ++i) e += err[i], s += ref[i];
  return s > 0 ? std::sqrt(e / s) : 0.0;
}

}  // namespace

const char* quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::Copy: return "copy";
    case QuantMethod::RoundToNearest: return "rtn";
    case QuantMethod::Importance: return "imatrix";
    case QuantMethod::Gptq: return "gptq";
  }
  return "?";
}

Result<QuantizeReport> quantize_model(const QuantizeOptions& options, ThreadPool& pool,
                                      const std::function<void(double)>& progress) {
  auto opened = GgufFile::open(options.input);
  if (!opened.ok()) return Error{opened.error()};
  const GgufFile& in = opened.value();
  const QuantModelFacts facts = model_facts(in);

  QuantizeReport report;
  GgufWriter w;
  for (const std::string& key : in.keys()) w.set_value(key, *in.find(key));
  w.set_u32("general.file_type", options.scheme.file_type);
  w.set_u32("general.quantization_version", 2);  // the block layouts of ggml's current quantization
  for (const TensorView& t : in.tensors()) {
    std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
    TensorQuantReport r{t.name, t.shape_string(), t.type, t.type, t.n_bytes, t.n_bytes, false, QuantMethod::Copy, 0.0};
    if (const auto to = quant_tensor_type(options.scheme, options.pure, t.name, dims, facts); to && *to != t.type) {
      if (!is_float(t.type))
        return Error{"tensor '" + t.name + "' is already " + dtype_name(t.type) + ": quantizing it to " + dtype_name(*to) +
                     " would compound the error; start from an F32, F16 or BF16 file"};
      r.to = *to;
      r.converted = true;
      r.method = options.hessians && has_block_grid(*to) && options.hessians->find(t.name, 0) ? QuantMethod::Gptq
                 : options.importance && options.importance->find(t.name, 0)             ? QuantMethod::Importance
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

  size_t done = 0;
  Status failed;
  const Status written = w.write(
      options.output,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        const TensorView& t = in.tensors()[i];
        TensorQuantReport& r = report.tensors[i];
        if (r.method == QuantMethod::Gptq) {
          if (Status s = convert_gptq(t, r.to, bytes.data(), *options.hessians, options.gptq, pool); !s.ok() && failed.ok()) failed = s;
        } else if (r.converted) {
          convert_rows(t, r.to, bytes.data(), options.importance, pool);
        } else {
          std::memcpy(bytes.data(), t.data, t.n_bytes);
        }
        if (r.converted) r.rel_error = relative_error(t, r.to, bytes.data(), pool);
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
