#include "model/model_quantizer.h"

#include <cmath>
#include <cstring>

#include "io/gguf.h"
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

// Converts one tensor's rows from t.type to `to` into out, on the pool (with `importance`, each row by
// quantize_row_weighted with its slice's weights); returns the relative RMS error of the converted rows
// against the source.
double convert_rows(const TensorView& t, DType to, uint8_t* out, const ImportanceMatrix* importance, ThreadPool& pool) {
  const size_t n = static_cast<size_t>(t.ne[0]), out_row = row_bytes(to, n);
  const size_t n_rows = static_cast<size_t>(t.n_rows());
  std::vector<double> err(static_cast<size_t>(pool.n_threads()), 0.0), ref(err.size(), 0.0);  // [threads]
  pool.parallel_for_dynamic(n_rows, 1, [&](size_t begin, size_t end, int thread) {
    std::vector<float> src(n), back(n);  // [n] a source row, and the converted row decoded again
    for (size_t r = begin; r < end; ++r) {
      dequantize_row(t.type, t.row(static_cast<int64_t>(r)), src.data(), n);
      if (importance)
        quantize_row_weighted(to, src.data(), out + r * out_row, n, importance->find(t.name, static_cast<int64_t>(r) / t.ne[1]));
      else
        quantize_row(to, src.data(), out + r * out_row, n);
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
    TensorQuantReport r{t.name, t.shape_string(), t.type, t.type, t.n_bytes, t.n_bytes, false, false, 0.0};
    if (const auto to = quant_tensor_type(options.scheme, options.pure, t.name, dims, facts); to && *to != t.type) {
      if (!is_float(t.type))
        return Error{"tensor '" + t.name + "' is already " + dtype_name(t.type) + ": quantizing it to " + dtype_name(*to) +
                     " would compound the error; start from an F32, F16 or BF16 file"};
      r.to = *to;
      r.converted = true;
      r.weighted = options.importance && options.importance->find(t.name, 0);
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
  const Status written = w.write(
      options.output,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        const TensorView& t = in.tensors()[i];
        TensorQuantReport& r = report.tensors[i];
        if (r.converted) r.rel_error = convert_rows(t, r.to, bytes.data(), options.importance, pool);
        else std::memcpy(bytes.data(), t.data, t.n_bytes);
        done += t.n_bytes;
        if (progress) progress(report.bytes_in ? static_cast<double>(done) / static_cast<double>(report.bytes_in) : 1.0);
      },
      in.alignment());
  if (!written.ok()) return Error{written.error()};
  return report;
}

}  // namespace kestrel
