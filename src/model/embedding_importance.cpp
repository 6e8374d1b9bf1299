#include "model/embedding_importance.h"

#include <regex>
#include <vector>

#include "model/tensor_conversion.h"
#include "quant/quantize.h"

namespace kestrel {

Status add_embedding_importance(const GgufFile& file, ImportanceMatrix& m) {
  const std::string embedding = "token_embd.weight";
  const TensorView* table = file.find_tensor(embedding);
  if (!table || m.tensors.count(embedding)) return Status{};
  const int64_t n_embd = table->ne[0];
  static const std::regex residual_norm(R"((blk\.\d+\.(attn|ffn)_norm|output_norm)\.weight)");
  std::vector<double> sums(static_cast<size_t>(n_embd), 0.0);  // [n_embd]
  std::vector<float> gamma(sums.size());                       // [n_embd] one norm's weights
  int norms = 0;
  for (const TensorView& t : file.tensors()) {
    if (!std::regex_match(t.name, residual_norm)) continue;
    if (t.n_elements() != n_embd)
      return Error{"tensor '" + t.name + "' has " + std::to_string(t.n_elements()) + " weights; the embedding's rows have " +
                   std::to_string(n_embd)};
    if (!is_float_type(t.type)) return Error{"tensor '" + t.name + "' is " + dtype_name(t.type) + ", not a float type"};
    dequantize_row(t.type, t.data, gamma.data(), gamma.size());
    for (size_t j = 0; j < gamma.size(); ++j) sums[j] += static_cast<double>(gamma[j]) * gamma[j];
    ++norms;
  }
  if (norms == 0) return Status{};
  ImportanceMatrix::Entry& e = m.tensors[embedding];
  e.n_in = n_embd;
  e.n_slices = 1;
  e.tokens = {1};  // derived from the weights, not measured: one nominal row (only written files read it)
  e.mean_square.resize(sums.size());
  for (size_t j = 0; j < sums.size(); ++j) e.mean_square[j] = static_cast<float>(sums[j] / norms);
  return Status{};
}

}  // namespace kestrel
