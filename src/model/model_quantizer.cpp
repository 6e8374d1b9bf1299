#include "model/model_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "io/gguf.h"
#include "model/w8a8_quantizer.h"
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
  const auto heads = file.get_int(prefix + "attention.head_count"), kv_heads = file.get_int(prefix + "attention.head_count_kv");
  if (heads.ok() && heads.value() && kv_heads.ok() && kv_heads.value() && *kv_heads.value() > 0)
    facts.n_gqa = static_cast<int>(*heads.value() / *kv_heads.value());
  return facts;
}

// The float rows a tensor is converted from: the file's, or new contents (an AWQ fold).
struct SourceRows {
  const TensorView& t;
  const std::vector<float>* replaced = nullptr;  // [n_elements] or null
  void row(int64_t r, float* dst) const {
    const size_t n = static_cast<size_t>(t.ne[0]);
    if (replaced) std::copy_n(replaced->data() + static_cast<size_t>(r) * n, n, dst);
    else dequantize_row(t.type, t.row(r), dst, n);
  }
};

// Converts every row of src to `to` into out, on the pool: each row by quantize_row_weighted with its
// slice's importance where `importance` is given; without one, K-quants by the same search with equal
// weights (as llama.cpp's reference K-quantizers search each sub-block's scale and offset) and the
// 32-block types by quantize_row.
void convert_rows(const SourceRows& src, DType to, uint8_t* out, const ImportanceMatrix* importance, ThreadPool& pool) {
  const TensorView& t = src.t;
  const size_t n = static_cast<size_t>(t.ne[0]), out_row = row_bytes(to, n);
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 1, [&](size_t begin, size_t end, int) {
    std::vector<float> x(n);  // [n] a source row
    for (size_t r = begin; r < end; ++r) {
      src.row(static_cast<int64_t>(r), x.data());
      if (importance)
        quantize_row_weighted(to, x.data(), out + r * out_row, n, importance->find(t.name, static_cast<int64_t>(r) / t.ne[1]));
      else if (dtype_traits(to).block_elems == kQK_K)  // the K-quants
        quantize_row_weighted(to, x.data(), out + r * out_row, n, nullptr);
      else
        quantize_row(to, x.data(), out + r * out_row, n);
    }
  });
}

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

// RMS of (converted - source) / RMS of source over all rows.
double relative_error(const SourceRows& src, DType to, const uint8_t* out, ThreadPool& pool) {
  const size_t n = static_cast<size_t>(src.t.ne[0]), out_row = row_bytes(to, n);
  std::vector<double> err(static_cast<size_t>(pool.n_threads()), 0.0), ref(err.size(), 0.0);  // [threads]
  pool.parallel_for_dynamic(static_cast<size_t>(src.t.n_rows()), 1, [&](size_t begin, size_t end, int thread) {
    std::vector<float> x(n), back(n);  // [n] a source row, and the converted row decoded again
    for (size_t r = begin; r < end; ++r) {
      src.row(static_cast<int64_t>(r), x.data());
      dequantize_row(to, out + r * out_row, back.data(), n);
      for (size_t i = 0; i < n; ++i) {
        err[static_cast<size_t>(thread)] += (back[i] - x[i]) * static_cast<double>(back[i] - x[i]);
        ref[static_cast<size_t>(thread)] += x[i] * static_cast<double>(x[i]);
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
  const QuantModelFacts facts = model_facts(in);
  const bool needs_hessians = options.method == QuantMethod::Gptq || options.method == QuantMethod::Awq;
  if ((needs_hessians && !options.hessians) || (options.method == QuantMethod::Importance && !options.importance))
    return Error{std::string("quantizing by ") + quant_method_name(options.method) + " needs calibration data"};

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
      const bool gptq = options.method == QuantMethod::Gptq && has_block_grid(*to) && options.hessians->find(t.name, 0);
      r.method = gptq ? QuantMethod::Gptq
                 : options.importance && options.importance->find(t.name, 0) ? QuantMethod::Importance
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
          else convert_rows(src, r.to, bytes.data(), options.importance, pool);
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
