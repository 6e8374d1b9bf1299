#include "model/calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "model/activation_observer.h"
#include "quant/linalg.h"

namespace kestrel {
namespace {

int64_t slices_of(const TensorView& t) { return t.n_dims >= 3 ? t.ne[2] : 1; }

// The file's tensor slice behind each matrix the forward multiplies, by its data pointer.
class SliceIndex {
 public:
  struct Slice {
    const TensorView* tensor;
    int64_t slice;
  };
  explicit SliceIndex(const Model& model) {
    for (const TensorView& t : model.file().tensors()) {
      if (t.n_dims < 2) continue;
      for (int64_t s = 0; s < slices_of(t); ++s) slice_of_.emplace(WeightMatrix::from(t, s).data, Slice{&t, s});
    }
  }
  // Null for a matrix that is not a tensor of the file (none in these models).
  const Slice* find(const WeightMatrix& w) const {
    const auto it = slice_of_.find(w.data);
    return it == slice_of_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<const uint8_t*, Slice> slice_of_;
};

// Sums x_j^2 per input channel of every matrix slice it sees.
class ImportanceCollector : public ActivationObserver {
 public:
  explicit ImportanceCollector(const Model& model) : index_(model) {}

  void observe(std::span<const WeightMatrix> ms, const float* x, int n_tok) override {
    for (const WeightMatrix& w : ms) observe_one(w, x, n_tok);
  }

  void observe_one(const WeightMatrix& w, const float* x, int n_tok) {
    const SliceIndex::Slice* it = index_.find(w);
    if (!it) return;
    const TensorView& t = *it->tensor;
    Sums& sums = sums_[&t];
    if (sums.squares.empty()) {
      sums.squares.assign(static_cast<size_t>(w.n_in * slices_of(t)), 0.0);
      sums.max_abs.assign(sums.squares.size(), 0.0f);
      sums.tokens.assign(static_cast<size_t>(slices_of(t)), 0);
    }
    double* sq = sums.squares.data() + static_cast<size_t>(it->slice * w.n_in);
    float* amax = sums.max_abs.data() + static_cast<size_t>(it->slice * w.n_in);
    for (int r = 0; r < n_tok; ++r) {
      const float* row = x + static_cast<size_t>(r) * static_cast<size_t>(w.n_in);
      for (int64_t j = 0; j < w.n_in; ++j) {
        sq[j] += static_cast<double>(row[j]) * row[j];
        amax[j] = std::max(amax[j], std::fabs(row[j]));
      }
    }
    sums.tokens[static_cast<size_t>(it->slice)] += n_tok;
  }

  ImportanceMatrix result() const {
    ImportanceMatrix m;
    for (const auto& [tensor, sums] : sums_) {
      ImportanceMatrix::Entry& e = m.tensors[tensor->name];
      e.n_in = tensor->ne[0];
      e.n_slices = static_cast<int64_t>(sums.tokens.size());
      e.tokens = sums.tokens;
      e.max_abs = sums.max_abs;
      e.mean_square.resize(sums.squares.size());
      for (size_t i = 0; i < sums.squares.size(); ++i) {
        const int64_t n = sums.tokens[i / static_cast<size_t>(e.n_in)];
        e.mean_square[i] = n ? static_cast<float>(sums.squares[i] / static_cast<double>(n)) : 0.0f;
      }
    }
    return m;
  }

 private:
  struct Sums {
    std::vector<double> squares;  // [n_slices][n_in]
    std::vector<float> max_abs;   // [n_slices][n_in]
    std::vector<int64_t> tokens;  // [n_slices]
  };
  SliceIndex index_;
  std::unordered_map<const TensorView*, Sums> sums_;
};

// h [n][n] (lower triangle) += x^T x for x [n_tok][n]: x is transposed once so that every entry is one
// contiguous dot over the tokens; rows of h are shared out over the pool.
void accumulate_gram(ThreadPool& pool, const float* x, int n_tok, int64_t n, float* h) {
  std::vector<float> xt(static_cast<size_t>(n) * static_cast<size_t>(n_tok));  // [n][n_tok]
  for (int t = 0; t < n_tok; ++t)
    for (int64_t i = 0; i < n; ++i) xt[static_cast<size_t>(i * n_tok + t)] = x[static_cast<size_t>(t) * static_cast<size_t>(n) + static_cast<size_t>(i)];
  pool.parallel_for_dynamic(static_cast<size_t>(n), 8, [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i) {
      const float* xi = xt.data() + i * static_cast<size_t>(n_tok);
      float* hi = h + i * static_cast<size_t>(n);
      for (size_t j = 0; j <= i; ++j) hi[j] += dot(xi, xt.data() + j * static_cast<size_t>(n_tok), n_tok);
    }
  });
}

// Accumulates X^T X per distinct input: the matrices of one observe call share the first one's sums.
class HessianCollector : public ActivationObserver {
 public:
  HessianCollector(const Model& model, ThreadPool& pool) : index_(model), pool_(pool) {}

  void observe(std::span<const WeightMatrix> ms, const float* x, int n_tok) override {
    std::shared_ptr<HessianSet::Hessian> sums;
    for (const WeightMatrix& w : ms) {
      const SliceIndex::Slice* at = index_.find(w);
      if (!at) continue;
      auto& slots = set_.tensors[at->tensor->name];
      if (slots.empty()) slots.resize(static_cast<size_t>(slices_of(*at->tensor)));
      auto& slot = slots[static_cast<size_t>(at->slice)];
      if (!slot) {
        if (!sums) {
          sums = std::make_shared<HessianSet::Hessian>();
          sums->n_in = w.n_in;
          sums->h.assign(static_cast<size_t>(w.n_in * w.n_in), 0.0f);
          owned_.push_back(sums);
        }
        slot = sums;
      } else if (!sums) {
        sums = std::const_pointer_cast<HessianSet::Hessian>(slot);
      }
    }
    if (!sums) return;
    accumulate_gram(pool_, x, n_tok, sums->n_in, sums->h.data());
    sums->tokens += n_tok;
  }

  // The means, made symmetric.
  HessianSet result() {
    for (const auto& hs : owned_) {
      const int64_t n = hs->n_in;
      const float inv = hs->tokens ? 1.0f / static_cast<float>(hs->tokens) : 0.0f;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          const float v = hs->h[static_cast<size_t>(i * n + j)] * inv;
          hs->h[static_cast<size_t>(i * n + j)] = v;
          hs->h[static_cast<size_t>(j * n + i)] = v;
        }
    }
    return std::move(set_);
  }

 private:
  SliceIndex index_;
  ThreadPool& pool_;
  HessianSet set_;
  std::vector<std::shared_ptr<HessianSet::Hessian>> owned_;  // each distinct input's sums once
};

Status check_chunks(const Model& model, const std::vector<std::vector<int32_t>>& chunks) {
  size_t tokens = 0;
  for (const auto& c : chunks) {
    tokens += c.size();
    for (int32_t t : c)
      if (t < 0 || t >= model.hparams().n_vocab)
        return Error{"calibration token " + std::to_string(t) + " is outside the vocabulary"};
  }
  if (tokens == 0) return Error{"the calibration text has no tokens"};
  return Status{};
}

// Runs each chunk (a sequence from position 0, every position's logits) with `observer` watching.
void run_chunks(const Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& chunks,
                ActivationObserver& observer, const std::function<void(double)>& progress) {
  const int32_t n_vocab = model.hparams().n_vocab;
  size_t longest = 0;
  for (const auto& c : chunks) longest = std::max(longest, c.size());
  constexpr int kPage = 16;
  const int32_t n_blocks = static_cast<int32_t>((longest + kPage - 1) / kPage);
  KvStorage kv(model.kv_spec(n_blocks, kPage, KvType::F32));
  ForwardWorkspace ws;
  ws.observer = &observer;
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
}

}  // namespace

const HessianSet::Hessian* HessianSet::find(const std::string& name, int64_t slice) const {
  const auto it = tensors.find(name);
  if (it == tensors.end() || slice < 0 || slice >= static_cast<int64_t>(it->second.size())) return nullptr;
  const auto& h = it->second[static_cast<size_t>(slice)];
  return h && h->tokens > 0 ? h.get() : nullptr;
}

size_t HessianSet::bytes() const {
  std::unordered_map<const Hessian*, size_t> distinct;
  for (const auto& [name, slots] : tensors)
    for (const auto& h : slots)
      if (h) distinct[h.get()] = h->h.size() * sizeof(float);
  size_t total = 0;
  for (const auto& [h, b] : distinct) total += b;
  return total;
}

Result<ImportanceMatrix> collect_importance(const Model& model, ThreadPool& pool,
                                            const std::vector<std::vector<int32_t>>& chunks,
                                            const std::function<void(double)>& progress) {
  if (Status ok = check_chunks(model, chunks); !ok.ok()) return Error{ok.error()};
  ImportanceCollector collector(model);
  run_chunks(model, pool, chunks, collector, progress);
  return collector.result();
}

ImportanceMatrix importance_from_hessians(const HessianSet& hessians) {
  ImportanceMatrix m;
  for (const auto& [name, slots] : hessians.tensors) {
    ImportanceMatrix::Entry& e = m.tensors[name];
    e.n_slices = static_cast<int64_t>(slots.size());
    e.tokens.assign(slots.size(), 0);
    for (const auto& h : slots)
      if (h) e.n_in = h->n_in;
    e.mean_square.assign(slots.size() * static_cast<size_t>(e.n_in), 0.0f);
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!slots[s]) continue;
      e.tokens[s] = slots[s]->tokens;
      for (int64_t j = 0; j < e.n_in; ++j) e.mean_square[s * static_cast<size_t>(e.n_in) + static_cast<size_t>(j)] = slots[s]->h[static_cast<size_t>(j * e.n_in + j)];
    }
  }
  return m;
}

Result<HessianSet> collect_hessians(const Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& chunks,
                                    const std::function<void(double)>& progress) {
  if (Status ok = check_chunks(model, chunks); !ok.ok()) return Error{ok.error()};
  HessianCollector collector(model, pool);
  run_chunks(model, pool, chunks, collector, progress);
  return collector.result();
}

}  // namespace kestrel
