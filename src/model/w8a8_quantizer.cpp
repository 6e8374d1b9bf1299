#include "model/w8a8_quantizer.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/fp16.h"
#include "io/gguf.h"
#include "model/tensor_conversion.h"
#include "quant/quantize.h"
#include "quant/w8a8.h"

namespace kestrel {
namespace {

// The layer projections that become int8 matrices (2-D ones; MoE experts stay weight-only).
constexpr const char* kInt8Projections[] = {"attn_q",    "attn_k",   "attn_v",   "attn_output",    "attn_q_a",
                                            "attn_q_b",  "attn_kv_a_mqa",        "ffn_gate",       "ffn_up",
                                            "ffn_down",  "ffn_gate_shexp",       "ffn_up_shexp",   "ffn_down_shexp"};

constexpr size_t kMaxOutlierShare = 32;  // at most 1/32 of a matrix's input channels stay in float

bool is_int8_target(const TensorView& t) {
  if (t.n_dims != 2 || !is_float_type(t.type) || t.name.rfind("blk.", 0) != 0) return false;
  for (const char* p : kInt8Projections)
    if (t.name.ends_with(std::string(".") + p + ".weight")) return true;
  return false;
}

std::vector<float> read_floats(const TensorView& t) {
  const size_t n = static_cast<size_t>(t.ne[0]);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));  // [n_rows][n]
  for (int64_t r = 0; r < t.n_rows(); ++r) dequantize_row(t.type, t.row(r), out.data() + static_cast<size_t>(r) * n, n);
  return out;
}

// Matrices sharing one input (all int8), and what produces that input, whose channel p is divided by the
// factor: a norm weight's element p, or a producer matrix's row p (and its bias's element p). Nothing else
// reads the producer's output, so the float model is unchanged.
struct SmoothGroup {
  std::vector<std::string> divided;  // norm weight, or producer matrix (+ bias)
  std::vector<std::string> matrices;
  std::vector<int64_t> tie;          // [n_in] input channel -> producer channel; empty: the same
};

// Per layer: attn_norm -> q/k/v (or MLA's down projections); ffn_norm -> gate/up (dense layers);
// attn_v's rows -> attn_output (the attention output is linear in V; the heads of a KV group share V's
// rows, so their channels share factors); ffn_up's rows -> ffn_down (silu(gate) * up is linear in up).
std::vector<SmoothGroup> smooth_groups(const GgufFile& in, const std::set<std::string>& int8) {
  std::vector<SmoothGroup> groups;
  const auto add = [&](SmoothGroup g) {
    for (const std::string& m : g.matrices)
      if (!int8.count(m)) return;
    for (const std::string& d : g.divided)
      if (!in.find_tensor(d)) return;
    if (!g.matrices.empty()) groups.push_back(std::move(g));
  };
  for (int il = 0; in.find_tensor("blk." + std::to_string(il) + ".attn_norm.weight"); ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t n_head = arch_layer_int(in, "attention.head_count", il);
    const int64_t n_kv_head = arch_layer_int(in, "attention.head_count_kv", il) ? arch_layer_int(in, "attention.head_count_kv", il) : n_head;
    SmoothGroup attn{{p + "attn_norm.weight"}, {}, {}};
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_q_a", "attn_kv_a_mqa"})
      if (in.find_tensor(p + n + ".weight")) attn.matrices.push_back(p + n + ".weight");
    add(attn);
    const bool dense = !in.find_tensor(p + "ffn_gate_inp.weight") && in.find_tensor(p + "ffn_up.weight");
    if (dense) add({{p + "ffn_norm.weight"}, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {}});
    if (dense) add({{p + "ffn_up.weight"}, {p + "ffn_down.weight"}, {}});
    const TensorView* o = in.find_tensor(p + "attn_output.weight");
    const TensorView* v = in.find_tensor(p + "attn_v.weight");
    if (o && v && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && o->ne[0] % n_head == 0) {
      const int64_t hd = o->ne[0] / n_head;
      if (v->n_dims != 2 || v->ne[1] != n_kv_head * hd) continue;
      SmoothGroup vo{{p + "attn_v.weight"}, {p + "attn_output.weight"}, attention_output_tie(n_head, n_kv_head, hd)};
      if (in.find_tensor(p + "attn_v.bias")) vo.divided.push_back(p + "attn_v.bias");
      add(vo);
    }
  }
  return groups;
}

// What each int8 matrix is written with.
struct Int8Plan {
  std::vector<int32_t> outliers;  // [k] ascending
  float input_scale = 0.0f;       // static scale, or 0
};

// How a tensor of the written file is produced.
enum class Part { Copy, Convert, Int8, RowScale, InputScale, OutlierChannels, OutlierWeight };

}  // namespace

Result<QuantizeReport> quantize_model_w8a8(const QuantizeOptions& options, ThreadPool& pool,
                                           const std::function<void(double)>& progress) {
  auto opened = GgufFile::open(options.input);
  if (!opened.ok()) return Error{opened.error()};
  const GgufFile& in = opened.value();
  const bool smooth = options.smooth_alpha >= 0.0f;
  const bool calibrated = smooth || options.outlier_threshold > 0.0f || options.static_scales;
  if (calibrated && !options.importance)
    return Error{"W8A8 with SmoothQuant, outlier channels or static scales needs calibration (--calib TEXT)"};

  // The int8 matrices and the range of each input channel as it reaches them.
  std::set<std::string> int8;
  for (const TensorView& t : in.tensors())
    if (is_int8_target(t)) int8.insert(t.name);
  std::map<std::string, std::vector<float>> ranges;  // int8 matrix -> [n_in] max|x_j|
  if (calibrated)
    for (const std::string& name : int8) {
      const float* m = options.importance->find_max_abs(name, 0);
      if (!m)
        return Error{"the calibration has no activation range for '" + name +
                     "' (an imatrix file does not carry ranges: calibrate with --calib TEXT)"};
      ranges[name].assign(m, m + in.find_tensor(name)->ne[0]);
    }

  // SmoothQuant: scale the matrices' columns and divide their input's producer.
  std::map<std::string, std::vector<float>> replaced;  // tensor -> new contents [n_elements]
  const auto contents = [&](const std::string& name) -> std::vector<float>& {
    const auto it = replaced.find(name);
    return it != replaced.end() ? it->second : (replaced[name] = read_floats(*in.find_tensor(name)));
  };
  QuantizeReport report;
  if (smooth)
    for (const SmoothGroup& g : smooth_groups(in, int8)) {
      std::vector<const std::vector<float>*> ws;
      for (const std::string& m : g.matrices) ws.push_back(&contents(m));
      const std::vector<float> s = smoothing_factors(ranges[g.matrices[0]], ws, options.smooth_alpha, g.tie);
      const size_t n_in = s.size();
      for (const std::string& m : g.matrices) {
        std::vector<float>& w = contents(m);
        for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % n_in];
        for (size_t j = 0; j < n_in; ++j) ranges[m][j] /= s[j];
      }
      std::vector<float> producer_s(n_in);  // [producer channels] (tied channels share their factor)
      for (size_t j = 0; j < n_in; ++j) producer_s[g.tie.empty() ? j : static_cast<size_t>(g.tie[j])] = s[j];
      for (const std::string& d : g.divided) {
        std::vector<float>& t = contents(d);
        const size_t channels = static_cast<size_t>(in.find_tensor(d)->n_dims == 1 ? in.find_tensor(d)->ne[0] : in.find_tensor(d)->ne[1]);
        const size_t row = t.size() / channels;  // 1 for a norm weight or bias
        for (size_t i = 0; i < t.size(); ++i) t[i] /= producer_s[i / row];
      }
    }
  std::map<std::string, Int8Plan> plans;
  for (const std::string& name : int8) {
    Int8Plan& p = plans[name];
    if (!calibrated) continue;
    if (options.outlier_threshold > 0.0f)
      p.outliers = outlier_channels(ranges[name], options.outlier_threshold, ranges[name].size() / kMaxOutlierShare);
    if (options.static_scales) p.input_scale = std::max(static_input_scale(ranges[name], p.outliers), 1e-10f);
  }

  const auto q8 = find_quant_scheme("Q8_0");
  const QuantModelFacts facts = quant_model_facts(in);
  GgufWriter w;
  copy_metadata_for_quantized(in, w, options.scheme.file_type);
  struct Out {
    const TensorView* src;
    Part part;
  };
  std::vector<Out> outs;  // [written tensors]
  // One written tensor; `converted`: its bytes count among the converted weights' (an int8 matrix's scales
  // and outlier columns count with it in the bits per weight).
  const auto add = [&](const TensorView& t, Part part, const std::string& name, DType type, std::vector<int64_t> dims,
                       QuantMethod method, bool converted) {
    const size_t index = w.add_tensor(name, type, dims);
    const bool from_source = part == Part::Copy || part == Part::Convert || part == Part::Int8;  // else a companion
    TensorQuantReport r{name, "", from_source ? t.type : type, type, from_source ? t.n_bytes : 0, w.tensor_bytes(index),
                        method != QuantMethod::Copy, method, 0.0};
    TensorView shaped;
    shaped.n_dims = static_cast<int>(dims.size());
    std::copy(dims.begin(), dims.end(), shaped.ne.begin());
    r.shape = shaped.shape_string();
    report.bytes_in += r.bytes_in;
    report.bytes_out += r.bytes_out;
    if (converted) report.converted_bytes_out += r.bytes_out;
    if (part == Part::Int8 || part == Part::Convert) report.converted_weights += t.n_elements();
    report.tensors.push_back(r);
    outs.push_back({&t, part});
  };
  const QuantMethod int8_method = smooth ? QuantMethod::SmoothQuant : QuantMethod::W8A8;
  for (const TensorView& t : in.tensors()) {
    std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (int8.count(t.name)) {
      const Int8Plan& p = plans[t.name];
      const std::string base = t.name.substr(0, t.name.size() - 7);  // without ".weight"
      add(t, Part::Int8, t.name, DType::I8, dims, int8_method, true);
      add(t, Part::RowScale, base + ".weight_scale", DType::F32, {t.ne[1]}, QuantMethod::Copy, true);
      if (options.static_scales) add(t, Part::InputScale, base + ".input_scale", DType::F32, {1}, QuantMethod::Copy, true);
      if (!p.outliers.empty()) {
        const auto k = static_cast<int64_t>(p.outliers.size());
        add(t, Part::OutlierChannels, base + ".outlier_channels", DType::I32, {k}, QuantMethod::Copy, true);
        add(t, Part::OutlierWeight, base + ".outlier_weight", DType::F16, {k, t.ne[1]}, QuantMethod::Copy, true);
      }
      continue;
    }
    const auto to = quant_tensor_type(*q8, false, t.name, dims, facts);
    if (to && *to != t.type) {
      if (!is_float_type(t.type))
        return Error{"tensor '" + t.name + "' is already " + dtype_name(t.type) + ": start from an F32, F16 or BF16 file"};
      add(t, Part::Convert, t.name, *to, dims, QuantMethod::RoundToNearest, true);
    } else {
      add(t, Part::Copy, t.name, t.type, dims, QuantMethod::Copy, false);
    }
  }

  struct Int8Rows {
    std::vector<float> row_scale;          // [n_out]
    std::vector<uint16_t> outlier_weight;  // [n_out][k]
  } last;  // of the int8 matrix written last (its companions follow it)
  size_t done = 0;
  const Status written = w.write(
      options.output,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        const TensorView& t = *outs[i].src;
        TensorQuantReport& r = report.tensors[i];
        const auto source = replaced.find(t.name);
        const SourceRows src{t, source == replaced.end() ? nullptr : &source->second};
        const size_t n = static_cast<size_t>(t.ne[0]), rows = static_cast<size_t>(t.n_rows());
        switch (outs[i].part) {
          case Part::Copy:
            if (src.replaced) convert_rows(src, t.type, bytes.data(), nullptr, pool);  // a folded norm weight
            else std::memcpy(bytes.data(), t.data, t.n_bytes);
            break;
          case Part::Convert:
            convert_rows(src, r.to, bytes.data(), nullptr, pool);
            r.rel_error = relative_error(src, r.to, bytes.data(), pool);
            break;
          case Part::Int8: {
            const Int8Plan& p = plans[t.name];
            const size_t k = p.outliers.size();
            last.row_scale.assign(rows, 0.0f);
            last.outlier_weight.assign(rows * k, 0);
            ErrorSums error(pool.n_threads());
            pool.parallel_for_dynamic(rows, 1, [&](size_t begin, size_t end, int thread) {
              std::vector<float> x(n), back(n);  // [n] a source row, and its int8 row decoded again
              for (size_t row = begin; row < end; ++row) {
                src.row(static_cast<int64_t>(row), x.data());
                auto* q = reinterpret_cast<int8_t*>(bytes.data()) + row * n;
                last.row_scale[row] = quantize_int8_row(x.data(), n, p.outliers, q, last.outlier_weight.data() + row * k);
                for (size_t j = 0; j < n; ++j) back[j] = q[j] * last.row_scale[row];
                for (size_t j = 0; j < k; ++j)
                  back[static_cast<size_t>(p.outliers[j])] = fp16_to_fp32(last.outlier_weight[row * k + j]);
                error.add(thread, x.data(), back.data(), n);
              }
            });
            r.rel_error = error.relative();
            break;
          }
          case Part::RowScale: std::memcpy(bytes.data(), last.row_scale.data(), bytes.size()); break;
          case Part::InputScale: std::memcpy(bytes.data(), &plans[t.name].input_scale, sizeof(float)); break;
          case Part::OutlierChannels: std::memcpy(bytes.data(), plans[t.name].outliers.data(), bytes.size()); break;
          case Part::OutlierWeight: std::memcpy(bytes.data(), last.outlier_weight.data(), bytes.size()); break;
        }
        done += r.bytes_in;
        if (progress) progress(report.bytes_in ? static_cast<double>(done) / static_cast<double>(report.bytes_in) : 1.0);
      },
      in.alignment());
  if (!written.ok()) return Error{written.error()};
  return report;
}

}  // namespace kestrel
