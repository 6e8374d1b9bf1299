#include "model/packed_weights.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "core/large_buffer.h"

namespace kestrel {

std::vector<const TensorView*> PackedWeights::build(const ModelWeights& weights, int n_threads,
                                                    std::pair<int64_t, int64_t> experts) {
  std::vector<const TensorView*> matrices;
  if (weights.output) matrices.push_back(weights.output);  // none in a pipeline's earlier stages
  for (const LayerWeights& L : weights.layers)
    for (const TensorView* t : {L.wq, L.wk, L.wv, L.wo, L.wq_a, L.wq_b, L.wkv_a, L.ffn_gate, L.ffn_up, L.ffn_down,
                                L.ffn_gate_exps, L.ffn_up_exps, L.ffn_down_exps, L.ffn_gate_shexp, L.ffn_up_shexp,
                                L.ffn_down_shexp})
      if (t) matrices.push_back(t);
  // One job per (tensor, expert); jobs are claimed from an atomic counter.
  struct Job {
    const TensorView* tensor;
    int64_t expert;
  };
  std::vector<Job> jobs;
  for (const TensorView* t : matrices) {
    if ((t->type == DType::I8 || t->type == DType::FP8_E4M3) && !copies_.count(t)) {
      copies_[t] = allocate_large_buffer(t->n_bytes);
      std::memcpy(copies_[t].get(), t->data, t->n_bytes);
    }
    if (packed_.count(t) || !has_packed_layout(t->type, t->ne[0], t->ne[1])) continue;
    packed_[t].resize(static_cast<size_t>(t->ne[2]));
    const bool expert_tensor = t->ne[2] > 1;
    for (int64_t e = 0; e < t->ne[2]; ++e)
      if (!expert_tensor || (e >= experts.first && e < experts.second)) jobs.push_back({t, e});
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, n_threads); ++i)
    workers.emplace_back([&] {
      for (size_t j; (j = next.fetch_add(1)) < jobs.size();)
        packed_[jobs[j].tensor][static_cast<size_t>(jobs[j].expert)] =
            pack_for_kernels(WeightMatrix::from(*jobs[j].tensor, jobs[j].expert));
    });
  for (auto& w : workers) w.join();
  std::vector<const TensorView*> done;
  for (const auto& [t, _] : packed_) done.push_back(t);
  for (const auto& [t, _] : copies_) done.push_back(t);
  return done;
}

WeightMatrix PackedWeights::matrix(const TensorView& t, int64_t expert) const {
  WeightMatrix m = WeightMatrix::from(t, expert);
  const auto it = packed_.find(&t);
  if (it != packed_.end()) m.packed = it->second[static_cast<size_t>(expert)].get();
  if (const auto copy = copies_.find(&t); copy != copies_.end()) m.data = copy->second.get();
  if (m.type == DType::I8 && int8_) {
    const auto scales = int8_->find(&t);
    if (scales != int8_->end()) m.int8 = &scales->second;
  }
  return m;
}

}  // namespace kestrel
