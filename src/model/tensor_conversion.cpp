#include "model/tensor_conversion.h"

#include <algorithm>
#include <cmath>

#include "quant/blocks.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"

namespace kestrel {

void SourceRows::row(int64_t r, float* dst) const {
  const size_t n = static_cast<size_t>(t.ne[0]);
  if (replaced) std::copy_n(replaced->data() + static_cast<size_t>(r) * n, n, dst);
  else dequantize_row(t.type, t.row(r), dst, n);
}

void ErrorSums::add(int thread, const float* source, const float* back, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    err_[static_cast<size_t>(thread)] += (back[i] - source[i]) * static_cast<double>(back[i] - source[i]);
    ref_[static_cast<size_t>(thread)] += source[i] * static_cast<double>(source[i]);
  }
}

double ErrorSums::relative() const {
  double e = 0, s = 0;
  for (size_t i = 0; i < err_.size(); ++i) e += err_[i], s += ref_[i];
  return s > 0 ? std::sqrt(e / s) : 0.0;
}

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

double relative_error(const SourceRows& src, DType to, const uint8_t* out, ThreadPool& pool) {
  const size_t n = static_cast<size_t>(src.t.ne[0]), out_row = row_bytes(to, n);
  ErrorSums error(pool.n_threads());
  pool.parallel_for_dynamic(static_cast<size_t>(src.t.n_rows()), 1, [&](size_t begin, size_t end, int thread) {
    std::vector<float> x(n), back(n);  // [n] a source row, and the converted row decoded again
    for (size_t r = begin; r < end; ++r) {
      src.row(static_cast<int64_t>(r), x.data());
      dequantize_row(to, out + r * out_row, back.data(), n);
      error.add(thread, x.data(), back.data(), n);
    }
  });
  return error.relative();
}

int64_t arch_metadata_int(const GgufFile& file, const std::string& key) {
  const auto arch = file.get_string("general.architecture");
  if (!arch.ok() || !arch.value()) return 0;
  const auto v = file.get_int(*arch.value() + "." + key);
  return v.ok() && v.value() ? *v.value() : 0;
}

int64_t arch_layer_int(const GgufFile& file, const std::string& key, int layer) {
  const auto arch = file.get_string("general.architecture");
  if (!arch.ok() || !arch.value()) return 0;
  const GgufValue* v = file.find(*arch.value() + "." + key);
  if (!v || !v->is_array()) return arch_metadata_int(file, key);
  const auto i = static_cast<size_t>(layer);
  return i < v->numbers.size() && v->array_type != GgufValueType::STRING ? static_cast<int64_t>(v->numbers[i]) : 0;
}

QuantModelFacts quant_model_facts(const GgufFile& file) {
  QuantModelFacts facts;
  facts.n_layers = static_cast<int>(arch_metadata_int(file, "block_count"));
  facts.n_expert = static_cast<int>(arch_metadata_int(file, "expert_count"));
  facts.has_output = file.find_tensor("output.weight") != nullptr;
  const int64_t heads = arch_layer_int(file, "attention.head_count", 0), kv_heads = arch_layer_int(file, "attention.head_count_kv", 0);
  if (heads > 0 && kv_heads > 0) facts.n_gqa = static_cast<int>(heads / kv_heads);
  return facts;
}

void copy_metadata_for_quantized(const GgufFile& in, GgufWriter& w, uint32_t file_type) {
  for (const std::string& key : in.keys()) w.set_value(key, *in.find(key));
  w.set_u32("general.file_type", file_type);
  w.set_u32("general.quantization_version", 2);  // the block layouts of ggml's current quantization
}

std::vector<int64_t> attention_output_tie(int64_t n_head, int64_t n_kv_head, int64_t hd) {
  const int64_t per_group = n_head / n_kv_head;
  std::vector<int64_t> tie(static_cast<size_t>(n_head * hd));
  for (int64_t c = 0; c < n_head * hd; ++c) tie[static_cast<size_t>(c)] = (c / hd / per_group) * hd + c % hd;
  return tie;
}

}  // namespace kestrel
