// A loaded model: its file mapping, hyperparameters, architecture traits and weights by role, and the
// forward pass. A Model is immutable after load; KV storage and the thread pool are passed in, so two
// models (target and draft) can share a process.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "io/gguf.h"
#include "kv/kv_storage.h"
#include "model/arch.h"
#include "model/model_input.h"
#include "model/hparams.h"
#include "model/packed_weights.h"
#include "model/tensor_parallel_shard.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace kestrel {

class Model {
 public:
  // progress(fraction) is called while weight pages are read in (may be empty).
  // repack: build packed copies of the quantized matrices for the integer GEMM kernels (and release the
  // file pages they came from).
  // tensor_parallel: with more than one rank, this process holds only its rank's share of the weights
  // (model/tensor_parallel_shard.h), and every forward pass is a collective over it: each rank must run the
  // same batches in the same order (the communicator must outlive the model).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const std::function<void(double)>& progress = {},
                                             bool repack = true, Communicator* tensor_parallel = nullptr);
  static Result<std::unique_ptr<Model>> from_file(GgufFile file, Communicator* tensor_parallel = nullptr);

  const GgufFile& file() const { return file_; }
  // This rank's hyperparameters: under tensor parallelism its heads, KV heads and FFN channels per layer.
  const HParams& hparams() const { return hparams_; }
  // The tensor-parallel communicator (nullptr: one process holds every weight).
  Communicator* tensor_parallel() const { return tp_; }
  const ArchTraits& arch() const { return *arch_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of weights a single-token forward reads (every matrix once, embeddings one row).
  size_t weight_bytes_per_token() const;

  // KV cache geometry for this model with n_blocks pages of block_size tokens of `type` elements.
  KvCacheSpec kv_spec(int32_t n_blocks, int block_size, KvTypes types) const;

  // Runs the batch through every layer, writing each token's K/V into its slot in `kv` and the logits of
  // batch.logits_rows into logits: [logits_rows.size(), n_vocab] (the whole vocabulary on every rank). Positions must be < the block tables'
  // capacity, and each token's earlier positions must already be in the cache (or in this batch, earlier).
  // ws holds the activation buffers from one call to the next (see ForwardWorkspace); the overload without
  // it makes a fresh one per call.
  void forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits, ForwardWorkspace& ws) const;
  void forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits) const;

 private:
  Model() = default;
  void gather_logits(ThreadPool& pool, const WeightMatrix& output, const float* last, int n_out, float* logits,
                     ForwardWorkspace& ws) const;
  GgufFile file_;
  HParams hparams_;
  const ArchTraits* arch_ = nullptr;
  ModelWeights weights_;
  PackedWeights packed_;
  Communicator* tp_ = nullptr;                       // set when tensor parallel over more than one rank
  std::unique_ptr<TensorParallelShard> tp_shard_;    // this rank's views and copies, weights_ points into them
};

}  // namespace kestrel
