// A loaded model: its file mapping, hyperparameters, architecture traits and weights by role, and the
// forward pass. A Model is immutable after load; KV storage and the thread pool are passed in, so two
// models (target and draft) can share a process.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/status.h"
#include "core/thread_pool.h"
#include "dist/process_groups.h"
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

// Expert parallelism: the routed experts rank `rank` of n_ranks runs, [first, second) (an even share, in order).
std::pair<int, int> expert_share(int n_expert, int n_ranks, int rank);

class Model {
 public:
  // progress(fraction) is called while weight pages are read in (may be empty).
  // repack: build packed copies of the quantized matrices for the integer GEMM kernels (and release the
  // file pages they came from).
  // parallel: split over more than one process, this one holds only its share: its pipeline stage's
  // layers (an even share of them, in order) and, within them, its tensor rank's heads, channels and
  // vocabulary rows (model/tensor_parallel_shard.h) and its expert rank's experts (expert_share: it
  // routes every token, runs its experts, and the expert group sums the outputs). Context parallel ranks
  // hold every weight and split long batches by position (model/context_parallel.h). Every forward pass is
  // then a collective over the groups: each rank must run the same batches in the same order (the groups
  // must outlive the model).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const std::function<void(double)>& progress = {},
                                             bool repack = true, const ProcessGroups* parallel = nullptr);
  static Result<std::unique_ptr<Model>> from_file(GgufFile file, const ProcessGroups* parallel = nullptr);

  const GgufFile& file() const { return file_; }
  // This rank's hyperparameters: under tensor parallelism its heads, KV heads and FFN channels per layer.
  const HParams& hparams() const { return hparams_; }
  // The processes the model is split over (nullptr: this one holds every weight).
  const ProcessGroups* process_groups() const { return groups_; }
  // The layers this rank runs, [first, second): all of them but under pipeline parallelism.
  std::pair<int, int> layer_range() const { return {layer_begin_, layer_end_}; }
  // The routed experts this rank runs, [first, second): all of them but under expert parallelism.
  std::pair<int, int> expert_range() const { return {expert_begin_, expert_end_}; }
  const ArchTraits& arch() const { return *arch_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of weights a single-token forward reads (every matrix once, embeddings one row).
  size_t weight_bytes_per_token() const;

  // KV cache geometry for this model with n_blocks pages of block_size tokens of `type` elements (no KV
  // heads in another pipeline stage's layers).
  KvCacheSpec kv_spec(int32_t n_blocks, int block_size, KvTypes types) const;

  // Runs the batch through every layer, writing each token's K/V into its slot in `kv` and the logits of
  // batch.logits_rows into logits: [logits_rows.size(), n_vocab] (the whole vocabulary on every rank: a
  // pipeline's later stages get their input from the stage before, and the last one's logits go to all).
  // Positions must be < the block tables' capacity, and each token's earlier positions must already be in
  // the cache (or in this batch, earlier).
  // ws holds the activation buffers from one call to the next (see ForwardWorkspace); the overload without
  // it makes a fresh one per call.
  void forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits, ForwardWorkspace& ws) const;
  void forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits) const;
  // Like forward, but returns every token's hidden state after the output norm (what the output matrix
  // would multiply): hidden [n_tok, n_embd]; batch.logits_rows is ignored. Embeddings. The model must be
  // whole in this process (process_groups() null or not split).
  void hidden_states(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* hidden, ForwardWorkspace& ws) const;

 private:
  Model() = default;
  // A batch split by position over the context-parallel ranks (model/context_parallel.h).
  void forward_context_parallel(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits,
                                ForwardWorkspace& ws) const;
  // A batch through this pipeline stage's layers, as micro-batches (model/pipeline_parallel.h).
  void forward_pipeline(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits,
                        ForwardWorkspace& ws) const;
  // The stages of a forward pass: x [n_tok, n_embd] is the residual stream, logits [logits_rows, n_vocab].
  void embed(const ModelInput& batch, float* x) const;
  void run_layers(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* x, ForwardWorkspace& ws) const;
  void ffn(ThreadPool& pool, int il, float* x, int n_tok, ForwardWorkspace& ws) const;
  void project_logits(ThreadPool& pool, const ModelInput& batch, const float* x, float* logits, ForwardWorkspace& ws) const;
  void gather_logits(ThreadPool& pool, const WeightMatrix& output, const float* last, int n_out, float* logits,
                     ForwardWorkspace& ws) const;
  GgufFile file_;
  HParams hparams_;
  const ArchTraits* arch_ = nullptr;
  ModelWeights weights_;
  PackedWeights packed_;
  const ProcessGroups* groups_ = nullptr;            // set when split over more than one process
  Communicator* tp_ = nullptr;                       // set when tensor parallel over more than one rank
  Communicator* pp_ = nullptr;                       // set when pipeline parallel over more than one stage
  Communicator* ep_ = nullptr;                       // set when expert parallel over more than one rank
  Communicator* cp_ = nullptr;                       // set when context parallel over more than one rank
  int layer_begin_ = 0, layer_end_ = 0;              // this rank's layers
  int expert_begin_ = 0, expert_end_ = 0;            // this rank's routed experts
  std::unique_ptr<TensorParallelShard> tp_shard_;    // this rank's views and copies, weights_ points into them
};

}  // namespace kestrel
