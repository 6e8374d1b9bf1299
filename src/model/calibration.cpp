#include "model/calibration.h"

#include <numeric>
#include <unordered_map>

#include "model/activation_observer.h"

namespace kestrel {
namespace {

// Sums x_j^2 per input channel of every matrix slice it sees, by the slice's data pointer.
class ImportanceCollector : public ActivationObserver {
 public:
  explicit ImportanceCollector(const Model& model) {
    for (const TensorView& t : model.file().tensors()) {
      if (t.n_dims < 2) continue;
      const int64_t slices = t.n_dims >= 3 ? t.ne[2] : 1;
      for (int64_t s = 0; s < slices; ++s) slice_of_.emplace(WeightMatrix::from(t, s).data, Slice{&t, s});
    }
  }

  void observe(const WeightMatrix& w, const float* x, int n_tok) override {
    const auto it = slice_of_.find(w.data);
    if (it == slice_of_.end()) return;  // not a tensor of the file (no such matrix in these models)
    const TensorView& t = *it->second.tensor;
    Sums& sums = sums_[&t];
    if (sums.squares.empty()) {
      sums.squares.assign(static_cast<size_t>(w.n_in * (t.n_dims >= 3 ? t.ne[2] : 1)), 0.0);
      sums.tokens.assign(static_cast<size_t>(t.n_dims >= 3 ? t.ne[2] : 1), 0);
    }
    double* sq = sums.squares.data() + static_cast<size_t>(it->second.slice * w.n_in);
    for (int r = 0; r < n_tok; ++r) {
      const float* row = x + static_cast<size_t>(r) * static_cast<size_t>(w.n_in);
      for (int64_t j = 0; j < w.n_in; ++j) sq[j] += static_cast<double>(row[j]) * row[j];
    }
    sums.tokens[static_cast<size_t>(it->second.slice)] += n_tok;
  }

  ImportanceMatrix result() const {
    ImportanceMatrix m;
    for (const auto& [tensor, sums] : sums_) {
      ImportanceMatrix::Entry& e = m.tensors[tensor->name];
      e.n_in = tensor->ne[0];
      e.n_slices = static_cast<int64_t>(sums.tokens.size());
      e.tokens = sums.tokens;
      e.mean_square.resize(sums.squares.size());
      for (size_t i = 0; i < sums.squares.size(); ++i) {
        const int64_t n = sums.tokens[i / static_cast<size_t>(e.n_in)];
        e.mean_square[i] = n ? static_cast<float>(sums.squares[i] / static_cast<double>(n)) : 0.0f;
      }
    }
    return m;
  }

 private:
  struct Slice {
    const TensorView* tensor;
    int64_t slice;
  };
  struct Sums {
    std::vector<double> squares;  // [n_slices][n_in]
    std::vector<int64_t> tokens;  // [n_slices]
  };
  std::unordered_map<const uint8_t*, Slice> slice_of_;
  std::unordered_map<const TensorView*, Sums> sums_;
};

}  // namespace

const float* ImportanceMatrix::find(const std::string& name, int64_t slice) const {
  const auto it = tensors.find(name);
  if (it == tensors.end() || slice < 0 || slice >= it->second.n_slices || it->second.tokens[static_cast<size_t>(slice)] == 0)
    return nullptr;
  return it->second.mean_square.data() + static_cast<size_t>(slice * it->second.n_in);
}

Result<ImportanceMatrix> collect_importance(const Model& model, ThreadPool& pool,
                                            const std::vector<std::vector<int32_t>>& chunks,
                                            const std::function<void(double)>& progress) {
  const int32_t n_vocab = model.hparams().n_vocab;
  size_t longest = 0;
  for (const auto& c : chunks) {
    longest = std::max(longest, c.size());
    for (int32_t t : c)
      if (t < 0 || t >= n_vocab) return Error{"calibration token " + std::to_string(t) + " is outside the vocabulary"};
  }
  if (longest == 0) return Error{"the calibration text has no tokens"};
  constexpr int kPage = 16;
  const int32_t n_blocks = static_cast<int32_t>((longest + kPage - 1) / kPage);
  KvStorage kv(model.kv_spec(n_blocks, kPage, KvType::F32));
  ImportanceCollector collector(model);
  ForwardWorkspace ws;
  ws.observer = &collector;
  std::vector<int32_t> pages(static_cast<size_t>(n_blocks)), positions(longest), rows(longest);  // [n_blocks] [n] [n]
  std::iota(pages.begin(), pages.end(), 0);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);
  const std::vector<const int32_t*> tables(longest, pages.data());
  std::vector<float> logits;  // [n, n_vocab] unused
  for (size_t i = 0; i < chunks.size(); ++i) {
    const size_t n = chunks[i].size();
    if (n == 0) continue;
    logits.resize(n * static_cast<size_t>(n_vocab));
    const ModelInput batch{chunks[i], std::span<const int32_t>(positions.data(), n),
                           std::span<const int32_t* const>(tables.data(), n), std::span<const int32_t>(rows.data(), n)};
    model.forward(pool, batch, kv, logits.data(), ws);
    if (progress) progress(static_cast<double>(i + 1) / static_cast<double>(chunks.size()));
  }
  return collector.result();
}

}  // namespace kestrel
