// Repacked copies of a model's weight matrices for this CPU's GEMM kernels (compute's pack_for_kernels()),
// built once at load time, and the lookup that layers use to get a matrix (packed when a copy exists, the
// file's bytes otherwise).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compute/ops.h"
#include "model/weights.h"

namespace kestrel {

class PackedWeights {
 public:
  // Packs every matrix of a packable type (all experts of 3-D ones) using n_threads threads, and copies
  // int8 (W8A8) and FP8 matrices, which keep their row layout, into huge-page memory (file pages are 4 KiB:
  // the streaming prefetchers stop at every page's end, and decode read them at half the speed).
  // experts: of 3-D (expert) tensors only [first, second) are packed (an expert-parallel rank's share;
  // matrix() must not be asked for the others). Returns the tensors that were packed, so the caller may
  // release their file pages.
  std::vector<const TensorView*> build(const ModelWeights& weights, int n_threads,
                                       std::pair<int64_t, int64_t> experts = {0, INT64_MAX});

  // The scales matrix() attaches to int8 matrices (ModelWeights::int8, which must outlive this).
  void use_int8_scales(const std::unordered_map<const TensorView*, Int8Scales>& scales) { int8_ = &scales; }

  // The matrix for tensor t (expert e of a 3-D tensor), with its packed copy attached when there is one, and
  // its scales when it is int8.
  WeightMatrix matrix(const TensorView& t, int64_t expert = 0) const;

 private:
  std::unordered_map<const TensorView*, std::vector<std::shared_ptr<const PackedMatrix>>> packed_;  // tensor -> one per expert
  std::unordered_map<const TensorView*, std::shared_ptr<uint8_t[]>> copies_;  // tensor -> [n_bytes] its rows
  const std::unordered_map<const TensorView*, Int8Scales>* int8_ = nullptr;  // ModelWeights::int8
};

}  // namespace kestrel
