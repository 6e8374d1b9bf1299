#include "model/model.h"

#include <sys/mman.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "model/activation_observer.h"
#include "model/context_parallel.h"
#include "model/layers.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {
// x[n] += the sum over every rank of part[n] (part is overwritten with that sum).
void add_all_ranks(Communicator& comm, float* part, float* x, size_t n) {
  comm.all_reduce_sum(part, n);
  for (size_t i = 0; i < n; ++i) x[i] += part[i];
}

// Drops the whole pages inside [data, data + n) from this process (file-backed: re-read if touched again).
void release_pages(const uint8_t* data, size_t n) {
  const uintptr_t page = 4096, begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page,
                  end = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}
}  // namespace

std::pair<int, int> expert_share(int n_expert, int n_ranks, int rank) {
  return {rank * n_expert / n_ranks, (rank + 1) * n_expert / n_ranks};
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const std::function<void(double)>& progress,
                                           bool repack, const ProcessGroups* parallel) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return Error{file.error()};
  auto model = from_file(std::move(file).value(), parallel);
  if (!model.ok()) return Error{path + ": " + model.error()};
  // Read every weight page once now, so load time is paid here rather than in the first forward (a
  // rank of a split model reads only its share, as it packs it).
  const GgufFile& f = model.value()->file();
  size_t total = 0, done = 0, next_report = 0;
  for (const TensorView& t : f.tensors()) total += t.n_bytes;
  volatile uint8_t sink = 0;
  for (const TensorView& t : model.value()->groups_ ? std::span<const TensorView>() : std::span<const TensorView>(f.tensors())) {
    for (size_t off = 0; off < t.n_bytes; off += 4096) sink = sink + t.data[off];
    done += t.n_bytes;
    if (progress && done >= next_report) {
      progress(static_cast<double>(done) / static_cast<double>(total));
      next_report = done + total / 100;
    }
  }
  if (repack) {
    Model& m = *model.value();
    const int n_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (const TensorView* t : m.packed_.build(m.weights_, n_threads, {m.expert_begin_, m.expert_end_}))
      if (t != m.weights_.token_embd) release_pages(t->data, t->n_bytes);  // the packed copy replaces them
  }
  if (progress) progress(1.0);
  return model;
}

Result<std::unique_ptr<Model>> Model::from_file(GgufFile file, const ProcessGroups* parallel) {
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name.ok()) return Error{arch_name.error()};
  if (!arch_name.value()) return Error{"missing metadata 'general.architecture'"};
  const ArchTraits* arch = find_arch(*arch_name.value());
  if (!arch) {
    std::string names;
    for (const auto& n : supported_arch_names()) names += (names.empty() ? "" : ", ") + n;
    return Error{"architecture '" + *arch_name.value() + "' is not supported (supported: " + names + ")"};
  }
  auto hp = read_hparams(file, *arch);
  if (!hp.ok()) return Error{hp.error()};
  auto weights = bind_weights(file, *arch, hp.value());
  if (!weights.ok()) return Error{weights.error()};
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);  // TensorViews point into the mapping, which moves with the shared_ptr
  m->hparams_ = hp.value();
  m->arch_ = arch;
  m->weights_ = std::move(weights).value();
  const int n_layers = m->hparams_.n_layers;
  m->layer_end_ = n_layers;
  m->expert_end_ = std::max(m->hparams_.n_expert, 1);
  if (parallel && parallel->split()) {
    m->groups_ = parallel;
    if (parallel->pp() > 1) {
      const int pp = parallel->pp(), stage = parallel->stage();
      if (pp > n_layers)
        return Error{"pipeline parallelism over " + std::to_string(pp) + " stages needs at least as many layers (the model has " +
                     std::to_string(n_layers) + ")"};
      m->layer_begin_ = stage * n_layers / pp;
      m->layer_end_ = (stage + 1) * n_layers / pp;
      m->pp_ = parallel->pipeline.get();
    }
    if (parallel->cp() > 1) {
      if (arch->latent_attention) return Error{"context parallelism (--cp) does not run latent attention (MLA) models yet"};
      m->cp_ = parallel->context.get();
    }
    if (parallel->ep() > 1) {
      const int ep = parallel->ep(), n_expert = m->hparams_.n_expert;
      if (n_expert == 0) return Error{"expert parallelism (--ep) needs a mixture-of-experts model; this one is dense"};
      if (ep > n_expert)
        return Error{"expert parallelism over " + std::to_string(ep) + " ranks needs at least as many experts (the model has " +
                     std::to_string(n_expert) + ")"};
      std::tie(m->expert_begin_, m->expert_end_) = expert_share(n_expert, ep, parallel->expert->rank());
      m->ep_ = parallel->expert.get();
    }
    if (parallel->tp() > 1) {
      auto shard = shard_for_tensor_parallel(m->weights_, m->hparams_, *arch, parallel->tp(), parallel->tensor->rank(),
                                             m->layer_begin_, m->layer_end_);
      if (!shard.ok()) return Error{shard.error()};
      m->tp_shard_ = std::move(shard).value();
      m->hparams_ = std::move(m->tp_shard_->hparams);  // the shard keeps only its views, copies and plan
      m->weights_ = std::move(m->tp_shard_->weights);
      m->tp_ = parallel->tensor.get();
    }
    for (int il = 0; il < n_layers; ++il)  // another stage's layers: no weights here
      if (il < m->layer_begin_ || il >= m->layer_end_) m->weights_.layers[static_cast<size_t>(il)] = LayerWeights{};
    if (m->pp_ && parallel->stage() != parallel->pp() - 1) m->weights_.output = nullptr;  // the last stage's
  }
  m->packed_.use_int8_scales(m->weights_.int8);
  return m;
}

size_t Model::weight_bytes_per_token() const {
  size_t total = 0;
  for (const TensorView& t : file_.tensors())
    if (&t != weights_.token_embd) total += t.n_bytes;
  if (weights_.output == weights_.token_embd) total += weights_.token_embd->n_bytes;
  return total + weights_.token_embd->row_bytes();
}

KvCacheSpec Model::kv_spec(int32_t n_blocks, int block_size, KvTypes types) const {
  KvCacheSpec spec;
  spec.types = types;
  spec.n_layers = hparams_.n_layers;
  if (arch_->latent_attention) {  // one latent row per token: [kv_lora_rank | rope key], value = the latent
    spec.n_kv_heads = 1;
    spec.k_dim = hparams_.kv_lora_rank + hparams_.n_rot;
    spec.v_dim = hparams_.kv_lora_rank;
    spec.v_in_k = true;
    spec.types.v = types.k;
  } else {
    spec.n_kv_heads = hparams_.n_kv_heads;
    if (!hparams_.uniform_layers() || pp_)
      for (const LayerShape& s : hparams_.layer_shapes) spec.layer_kv_heads.push_back(s.n_kv_heads);
    spec.k_dim = hparams_.head_dim;
    spec.v_dim = hparams_.head_dim;
  }
  if (pp_) {  // KV heads only in this stage's layers
    spec.layer_kv_heads.resize(static_cast<size_t>(spec.n_layers), spec.n_kv_heads);
    for (int il = 0; il < spec.n_layers; ++il)
      if (il < layer_begin_ || il >= layer_end_) spec.layer_kv_heads[static_cast<size_t>(il)] = 0;
  }
  spec.block_size = block_size;
  spec.n_blocks = n_blocks;
  return spec;
}

void Model::forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits) const {
  ForwardWorkspace ws;
  forward(pool, batch, kv, logits, ws);
}

void Model::forward(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits, ForwardWorkspace& ws) const {
  const int n_tok = batch.n_tokens();
  if (cp_ && splits_by_context(n_tok, cp_->size())) return forward_context_parallel(pool, batch, kv, logits, ws);
  if (pp_) return forward_pipeline(pool, batch, kv, logits, ws);
  float* x = ws.get(ForwardWorkspace::Buffer::Residual, static_cast<size_t>(n_tok) * hparams_.n_embd);  // [n_tok, n_embd]
  embed(batch, x);
  run_layers(pool, batch, kv, x, ws);
  project_logits(pool, batch, x, logits, ws);
}

void Model::hidden_states(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* hidden,
                          ForwardWorkspace& ws) const {
  if (groups_ && groups_->split()) throw std::logic_error("hidden_states needs the whole model in one process");
  const int n_tok = batch.n_tokens();
  embed(batch, hidden);
  run_layers(pool, batch, kv, hidden, ws);
  ops::rmsnorm(pool, hidden, reinterpret_cast<const float*>(weights_.output_norm->data), hidden, n_tok, hparams_.n_embd,
               hparams_.rms_eps);
}

void Model::embed(const ModelInput& batch, float* x) const {
  const TensorView& embd = *weights_.token_embd;
  const int E = hparams_.n_embd;
  for (int t = 0; t < batch.n_tokens(); ++t)
    dequantize_row(embd.type, embd.row(batch.tokens[t]), x + static_cast<size_t>(t) * E, E);
}

// Step order per layer: norm -> attention -> residual add -> norm -> FFN (dense or MoE) -> residual add.
void Model::run_layers(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* x, ForwardWorkspace& ws) const {
  using Buffer = ForwardWorkspace::Buffer;
  const HParams& hp = hparams_;
  const int n_tok = batch.n_tokens(), E = hp.n_embd;
  const size_t n_act = static_cast<size_t>(n_tok) * E;
  // Latent attention rotates only its shared key and query parts, without frequency factors.
  const TensorView* freq_factors = arch_->latent_attention ? nullptr : weights_.rope_freqs;
  const ops::RopeTable rope = ops::rope_table(batch.positions, hp.n_rot, hp.rope_freq_base,
                                              freq_factors ? reinterpret_cast<const float*>(freq_factors->data) : nullptr);
  for (int il = layer_begin_; il < layer_end_; ++il) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(il)];
    // Dense attention and FFN blocks normalise their input as their first projections quantize it; latent
    // attention and MoE read the normalised rows in several places, so they get them written out in h.
    const ops::MatmulInput attn_in{x, reinterpret_cast<const float*>(L.attn_norm->data), hp.rms_eps};
    if (arch_->latent_attention) {
      float* h = ws.get(Buffer::Normed, n_act);  // [n_tok, n_embd] normalised input of the block
      ops::rmsnorm(pool, x, attn_in.norm_weight, h, n_tok, E, hp.rms_eps);
      layers::attention_mla(pool, packed_, hp, *arch_, L, rope, batch, kv.layer(il), h, x, ws);
    } else if (tp_) {  // this rank's heads' share of the output, summed over the ranks
      float* part = ws.get(Buffer::Partial, n_act);  // [n_tok, n_embd]
      std::fill_n(part, n_act, 0.f);
      layers::attention(pool, packed_, hp, hp.layer(il), *arch_, L, rope, batch, kv.layer(il), attn_in, part, ws);
      add_all_ranks(*tp_, part, x, n_act);
    } else {
      layers::attention(pool, packed_, hp, hp.layer(il), *arch_, L, rope, batch, kv.layer(il), attn_in, x, ws);
    }
    ffn(pool, il, x, n_tok, ws);
  }
}

// The FFN block of layer il on x [n_tok, n_embd], its output added in: dense or mixture of experts, this
// rank's share summed over its tensor- or expert-parallel group.
void Model::ffn(ThreadPool& pool, int il, float* x, int n_tok, ForwardWorkspace& ws) const {
  using Buffer = ForwardWorkspace::Buffer;
  const HParams& hp = hparams_;
  const LayerWeights& L = weights_.layers[static_cast<size_t>(il)];
  const int E = hp.n_embd;
  const size_t n_act = static_cast<size_t>(n_tok) * E;
  const ops::MatmulInput ffn_in{x, reinterpret_cast<const float*>(L.ffn_norm->data), hp.rms_eps};
  if (L.ffn_router) {
    float* h = ws.get(Buffer::Normed, n_act);  // [n_tok, n_embd] normalised input of the block
    ops::rmsnorm(pool, x, ffn_in.norm_weight, h, n_tok, E, hp.rms_eps);
    if (ep_) {  // this rank's experts' share of the output, summed over the expert group
      float* part = ws.get(Buffer::Partial, n_act);  // [n_tok, n_embd]
      std::fill_n(part, n_act, 0.f);
      layers::ffn_moe(pool, packed_, hp, L, h, part, n_tok, ws, {expert_begin_, expert_end_, ep_->rank() == 0});
      add_all_ranks(*ep_, part, x, n_act);
    } else {
      layers::ffn_moe(pool, packed_, hp, L, h, x, n_tok, ws);
    }
  } else if (tp_) {  // this rank's channels' share, summed over the ranks
    float* part = ws.get(Buffer::Partial, n_act);  // [n_tok, n_embd]
    layers::ffn_dense(pool, packed_.matrix(*L.ffn_gate), packed_.matrix(*L.ffn_up), packed_.matrix(*L.ffn_down),
                      ffn_in, part, n_tok, ws, ops::Accumulate::No, hp.layer(il).down_channel_begin);
    add_all_ranks(*tp_, part, x, n_act);
  } else {
    layers::ffn_dense(pool, packed_.matrix(*L.ffn_gate), packed_.matrix(*L.ffn_up), packed_.matrix(*L.ffn_down),
                      ffn_in, x, n_tok, ws, ops::Accumulate::Yes);
  }
}

// Only the rows whose logits are wanted are normalised and projected.
void Model::project_logits(ThreadPool& pool, const ModelInput& batch, const float* x, float* logits,
                           ForwardWorkspace& ws) const {
  const HParams& hp = hparams_;
  const int n_out = static_cast<int>(batch.logits_rows.size()), E = hp.n_embd;
  if (n_out == 0) return;  // (alike on every rank of a tensor-parallel group: no gather either)
  float* last = ws.get(ForwardWorkspace::Buffer::Last, static_cast<size_t>(n_out) * E);  // [n_out, n_embd]
  for (int i = 0; i < n_out; ++i)
    std::copy_n(x + static_cast<size_t>(batch.logits_rows[i]) * E, E, last + static_cast<size_t>(i) * E);
  ops::rmsnorm(pool, last, reinterpret_cast<const float*>(weights_.output_norm->data), last, n_out, E, hp.rms_eps);
  const WeightMatrix output = packed_.matrix(*weights_.output);
  if (ws.observer) ws.observer->observe(std::span<const WeightMatrix>(&output, 1), last, n_out);
  if (tp_) gather_logits(pool, output, last, n_out, logits, ws);
  else ops::matmul(pool, output, last, logits, n_out);
}

// Each rank's rows of the output matrix, gathered into [n_out, n_vocab] on every rank: the local rows go
// into a [n_out, widest share] slot (zero-padded), and the all_gather's [n_ranks][n_out][widest] is laid out
// by vocabulary.
void Model::gather_logits(ThreadPool& pool, const WeightMatrix& output, const float* last, int n_out, float* logits,
                          ForwardWorkspace& ws) const {
  using Buffer = ForwardWorkspace::Buffer;
  const std::vector<int>& offsets = tp_shard_->plan.vocab_offsets;  // [n_ranks + 1]
  const int n_ranks = tp_->size(), n_local = static_cast<int>(output.n_out);
  int widest = 0;
  for (int k = 0; k < n_ranks; ++k) widest = std::max(widest, offsets[k + 1] - offsets[k]);
  const size_t slot = static_cast<size_t>(n_out) * widest;
  float* local = ws.get(Buffer::Partial, slot);  // [n_out, widest]
  std::fill_n(local, slot, 0.f);
  float* rows = ws.get(Buffer::Logits, static_cast<size_t>(n_out) * n_local + slot * n_ranks);
  ops::matmul(pool, output, last, rows, n_out);  // [n_out, n_local]
  for (int i = 0; i < n_out; ++i)
    std::copy_n(rows + static_cast<size_t>(i) * n_local, n_local, local + static_cast<size_t>(i) * widest);
  float* all = rows + static_cast<size_t>(n_out) * n_local;  // [n_ranks][n_out][widest]
  tp_->all_gather(local, slot, all);
  const size_t n_vocab = static_cast<size_t>(offsets[n_ranks]);
  for (int k = 0; k < n_ranks; ++k)
    for (int i = 0; i < n_out; ++i)
      std::copy_n(all + static_cast<size_t>(k) * slot + static_cast<size_t>(i) * widest, offsets[k + 1] - offsets[k],
                  logits + static_cast<size_t>(i) * n_vocab + offsets[k]);
}

}  // namespace kestrel
