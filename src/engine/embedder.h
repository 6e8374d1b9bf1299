// Sentence embeddings: each input's tokens run through the model, their hidden states after the output
// norm are pooled into one vector (mean over tokens, the first token's (CLS) or the last token's) and
// L2-normalised.
//
// Each input runs in its own forward passes (of up to max_batch_tokens tokens, at fixed offsets), so its
// vector is bit for bit the same whatever other inputs come with it: the float GEMM kernels' accumulation
// order depends on the rows in a pass (register tiles of 1-6 tokens with 4, 2 or 1 FMA chains), so packing
// inputs together would make a vector depend on its neighbours. On a CPU, prefill is compute-bound past a
// few tokens: packing short inputs would save little more than one weight read per input.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "model/workspace.h"

namespace kestrel {

enum class Pooling { Mean, Cls, Last };

const char* pooling_name(Pooling pooling);
// "mean", "cls" or "last"; an error naming them otherwise.
Result<Pooling> parse_pooling(std::string_view name);
// The model's pooling from its metadata (pooling_type), else Last: a causal decoder's last token is the
// one that has seen the whole input.
Pooling model_pooling(const Model& model);

struct EmbedderConfig {
  Pooling pooling = Pooling::Last;
  bool normalize = true;             // L2-normalise each vector (OpenAI's embeddings are)
  int32_t max_batch_tokens = 512;    // most tokens per forward pass (longer inputs run in chunks)
  int32_t max_input_tokens = 2048;   // longest input (KV pages are sized for it)
  int32_t block_size = 16;
};

class Embedder {
 public:
  // The model must be whole in this process. KV pages are allocated on the first embed().
  Embedder(const Model& model, ThreadPool& pool, const EmbedderConfig& config);
  ~Embedder();

  // One vector [n_embd] per input, in order. Error (nothing computed) when an input is empty, longer than
  // max_input_tokens or holds a token outside the vocabulary.
  Result<std::vector<std::vector<float>>> embed(std::span<const std::vector<int32_t>> inputs);
  const EmbedderConfig& config() const { return config_; }
  int32_t n_embd() const { return model_.hparams().n_embd; }

 private:
  const Model& model_;
  ThreadPool& pool_;
  EmbedderConfig config_;
  std::unique_ptr<KvManager> pages_;
  std::unique_ptr<KvStorage> kv_;
  ForwardWorkspace ws_;
};

}  // namespace kestrel
