#include "model/model_pruner.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/gguf.h"
#include "model/structured_pruner.h"
#include "model/tensor_conversion.h"
#include "quant/quantize.h"
#include "quant/sparse24.h"

namespace kestrel {
namespace {

bool ends_with(const std::string& s, std::string_view end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

const char* pattern_name(const PruneSpec& spec) { return spec.pattern == PrunePattern::TwoFour ? "2:4" : "unstructured"; }



// Wanda's input norms of slice `slice` of t ([n_in], the roots of the mean squares), or empty without them.
std::vector<float> input_norms(const PruneOptions& options, const TensorView& t, int64_t slice) {
  const float* ms = options.importance ? options.importance->find(t.name, slice) : nullptr;
  if (!ms) return {};
  std::vector<float> norm(static_cast<size_t>(t.ne[0]));
  for (size_t j = 0; j < norm.size(); ++j) norm[j] = std::sqrt(std::max(ms[j], 0.0f));
  return norm;
}

// Prunes every slice of t (one per expert of a 3-D tensor): its float rows [n_rows][n_in], pruned.
std::vector<float> pruned_rows(const PruneOptions& options, const TensorView& t, ThreadPool& pool, bool& by_activations) {
  const int64_t n_in = t.ne[0], n_out = t.ne[1];
  std::vector<float> w(static_cast<size_t>(t.n_elements()));  // [n_rows][n_in]
  const SourceRows src{t};
  pool.parallel_for(static_cast<size_t>(t.n_rows()), 16, [&](size_t begin, size_t end, int) {
    for (size_t r = begin; r < end; ++r) src.row(static_cast<int64_t>(r), w.data() + r * static_cast<size_t>(n_in));
  });
  by_activations = options.spec.method == PruneMethod::Wanda;
  for (int64_t s = 0; s < t.n_rows() / n_out; ++s) {
    std::vector<float> norm;
    if (options.spec.method == PruneMethod::Wanda) {
      norm = input_norms(options, t, s);
      if (norm.empty()) {  // no calibration token reached it: magnitude within each row (equal norms)
        norm.assign(static_cast<size_t>(n_in), 1.0f);
        by_activations = false;
      }
    }
    prune_matrix(w.data() + static_cast<size_t>(s * n_out * n_in), n_out, n_in, options.spec, norm.empty() ? nullptr : norm.data(), pool);
  }
  return w;
}

// Fraction of zeros among the written weights, the relative error against the source and (with importance)
// the relative error with input channels weighted by their mean square.
void measure(const TensorView& t, DType to, const uint8_t* out, const ImportanceMatrix* importance, ThreadPool& pool,
             TensorPruneReport& r) {
  const size_t n = static_cast<size_t>(t.ne[0]), out_row = row_bytes(to, n);
  const int n_threads = pool.n_threads();
  std::vector<double> zeros(static_cast<size_t>(n_threads)), err(zeros), ref(zeros), werr(zeros), wref(zeros);
  bool weighted = true;
  for (int64_t s = 0; s < t.n_rows() / t.ne[1]; ++s) weighted = weighted && importance && importance->find(t.name, s);
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 4, [&](size_t begin, size_t end, int thread) {
    std::vector<float> x(n), back(n);  // [n] the source row and the written row decoded
    const auto th = static_cast<size_t>(thread);
    for (size_t row = begin; row < end; ++row) {
      SourceRows{t}.row(static_cast<int64_t>(row), x.data());
      dequantize_row(to, out + row * out_row, back.data(), n);
      const float* ms = weighted ? importance->find(t.name, static_cast<int64_t>(row) / t.ne[1]) : nullptr;
      for (size_t j = 0; j < n; ++j) {
        const double d = static_cast<double>(back[j]) - x[j];
        zeros[th] += back[j] == 0.0f;
        err[th] += d * d;
        ref[th] += static_cast<double>(x[j]) * x[j];
        if (ms) werr[th] += ms[j] * d * d, wref[th] += ms[j] * static_cast<double>(x[j]) * x[j];
      }
    }
  });
  double z = 0, e = 0, s = 0, we = 0, ws = 0;
  for (size_t i = 0; i < zeros.size(); ++i) z += zeros[i], e += err[i], s += ref[i], we += werr[i], ws += wref[i];
  r.sparsity = z / static_cast<double>(t.n_elements());
  r.rel_error = s > 0 ? std::sqrt(e / s) : 0.0;
  r.rel_output_error = weighted ? (ws > 0 ? std::sqrt(we / ws) : 0.0) : -1.0;
}

}  // namespace

std::optional<DType> pruned_tensor_type(const PruneOptions& options, const TensorView& t, bool pruned, const QuantModelFacts& facts) {
  const std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
  if (!pruned && !is_float_type(t.type)) return std::nullopt;  // requantizing would compound the error
  if (options.scheme) {
    const auto to = quant_tensor_type(*options.scheme, false, t.name, dims, facts);
    if (to && *to != t.type) return to;
    return pruned ? std::optional<DType>(t.type) : std::nullopt;
  }
  if (!pruned) return std::nullopt;
  if (options.spec.pattern == PrunePattern::TwoFour && t.ne[0] % kS24Block == 0) return DType::S24_F16;
  return t.type;
}

bool is_prunable_matrix(const std::string& name, const std::vector<int64_t>& dims) {
  return name.rfind("blk.", 0) == 0 && ends_with(name, ".weight") && dims.size() >= 2 &&
         name.find("_norm") == std::string::npos && name.find("ffn_gate_inp") == std::string::npos;
}

Result<PruneReport> prune_model(const PruneOptions& options, ThreadPool& pool, const std::function<void(double)>& progress) {
  if (options.spec.method == PruneMethod::Wanda && !options.importance)
    return Error{"Wanda pruning needs the calibration's activation norms (--calib TEXT or --imatrix FILE)"};
  if (options.spec.pattern == PrunePattern::Unstructured && !(options.spec.sparsity >= 0.0 && options.spec.sparsity < 1.0))
    return Error{"sparsity must be in [0, 1), got " + std::to_string(options.spec.sparsity)};
  if (options.scheme && is_sparse24(options.scheme->base) && options.spec.pattern != PrunePattern::TwoFour)
    return Error{std::string("the 2:4 types keep 2 of every 4 weights: ") + options.scheme->name + " goes with the 2:4 pattern"};
  auto opened = GgufFile::open(options.input);
  if (!opened.ok()) return Error{opened.error()};
  const GgufFile& in = opened.value();
  if (options.structured) {
    auto arch_name = in.get_string("general.architecture");
    const ArchTraits* arch = arch_name.ok() && arch_name.value() ? find_arch(*arch_name.value()) : nullptr;
    if (!arch) return Error{"structured pruning: the file's architecture is missing or not supported"};
    auto hp = read_hparams(in, *arch);
    if (!hp.ok()) return Error{hp.error()};
    const ImportanceMatrix* importance = options.spec.method == PruneMethod::Wanda ? options.importance : nullptr;
    auto keep = plan_structured(in, hp.value(), *options.structured, importance, pool);
    if (!keep.ok()) return Error{keep.error()};
    return write_structured(options, in, hp.value(), keep.value(), pool, progress);
  }
  const QuantModelFacts facts = quant_model_facts(in);

  PruneReport report;
  GgufWriter w;
  if (options.scheme) copy_metadata_for_quantized(in, w, options.scheme->file_type);
  else
    for (const std::string& key : in.keys()) w.set_value(key, *in.find(key));
  w.set_string("kestrel.pruning.method", options.spec.method == PruneMethod::Wanda ? "wanda" : "magnitude");
  w.set_string("kestrel.pruning.pattern", pattern_name(options.spec));
  w.set_f32("kestrel.pruning.sparsity", options.spec.pattern == PrunePattern::TwoFour ? 0.5f : static_cast<float>(options.spec.sparsity));
  for (const TensorView& t : in.tensors()) {
    const std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
    TensorPruneReport r{t.name, t.shape_string(), t.type, t.type, t.n_bytes, t.n_bytes};
    r.pruned = is_prunable_matrix(t.name, dims);
    if (r.pruned && !is_float_type(t.type))
      return Error{"tensor '" + t.name + "' is " + dtype_name(t.type) + ": prune a float (F32, F16, BF16) model, then quantize"};
    if (r.pruned && options.spec.pattern == PrunePattern::TwoFour && t.ne[0] % 4 != 0)
      return Error{"tensor '" + t.name + "': rows of " + std::to_string(t.ne[0]) + " do not split into groups of 4 for 2:4"};
    if (const auto to = pruned_tensor_type(options, t, r.pruned, facts)) r.to = *to;
    const size_t index = w.add_tensor(t.name, r.to, dims);
    r.bytes_out = w.tensor_bytes(index);
    report.bytes_in += r.bytes_in;
    report.bytes_out += r.bytes_out;
    report.tensors.push_back(r);
  }

  return write_pruned_file(w, in, options, std::move(report), pool, progress, [&](size_t i, std::vector<uint8_t>& bytes, TensorPruneReport& r) {
    const TensorView& t = in.tensors()[i];
    const std::vector<float> pruned = pruned_rows(options, t, pool, r.by_activations);
    convert_rows(SourceRows{t, &pruned}, r.to, bytes.data(), options.importance, pool);
    measure(t, r.to, bytes.data(), options.importance, pool, r);
    return t.n_elements();
  });
}

Result<PruneReport> write_pruned_file(const GgufWriter& w, const GgufFile& in, const PruneOptions& options, PruneReport report,
                                      ThreadPool& pool, const std::function<void(double)>& progress, const PruneTensor& prune_tensor) {
  size_t done = 0;
  const Status written = w.write(
      options.output,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        const TensorView& t = in.tensors()[i];
        TensorPruneReport& r = report.tensors[i];
        if (r.pruned) {
          report.pruned_weights += prune_tensor(i, bytes, r);
          report.zero_weights += std::llround(r.sparsity * static_cast<double>(t.n_elements()));
        } else if (r.to != t.type) {
          convert_rows(SourceRows{t}, r.to, bytes.data(), options.importance, pool);
        } else {
          std::memcpy(bytes.data(), t.data, t.n_bytes);
        }
        done += t.n_bytes;
        if (progress) progress(report.bytes_in ? static_cast<double>(done) / static_cast<double>(report.bytes_in) : 1.0);
      },
      in.alignment());
  if (!written.ok()) {
    std::filesystem::remove(options.output);
    return Error{written.error()};
  }
  return report;
}

}  // namespace kestrel
