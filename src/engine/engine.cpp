#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/model_drafter.h"
#include "engine/model_runner.h"
#include "engine/step_plan_relay.h"
#include "kv/kv_storage.h"
#include "model/key_centers.h"
#include "spec/ngram_drafter.h"
#include "spec/verify.h"

namespace kestrel {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::None: break;
  }
  return "";
}

namespace {
int32_t usable_seq_len(const Model& model, const EngineConfig& config) {
  const int32_t pool_tokens = config.n_blocks * config.scheduler.block_size;
  int32_t len = config.max_seq_len > 0 ? config.max_seq_len : model.hparams().n_ctx_train;
  if (len <= 0) len = pool_tokens;
  return std::min(len, pool_tokens);  // one sequence alone always fits, so preemption always ends
}

// Rank 0 of a model split over ranks relays its plans to the others.
std::unique_ptr<StepPlanRelay> relay_for(const Model& model, bool speculative) {
  const ProcessGroups* groups = model.process_groups();
  if (!groups || !groups->split()) return nullptr;
  Communicator* world = groups->world.get();
  if (world->rank() != 0) world->abort("the engine runs on rank 0; other ranks follow its step plans", 1);
  if (speculative) world->abort("speculative decoding does not run split over processes yet", 1);
  return std::make_unique<StepPlanRelay>(*world);
}

// A data-parallel replica on other ranks: the link to its leader.
std::unique_ptr<ReplicaLink> remote_for(const EngineConfig& config, int32_t n_vocab, bool speculative) {
  Communicator* link = config.replica_link;
  if (!link) return nullptr;
  if (speculative) link->abort("speculative decoding does not run with data-parallel replicas over ranks yet", 1);
  if (config.prefill_world) link->abort("data-parallel replicas over ranks do not run disaggregated", 1);
  return std::make_unique<ReplicaLink>(*link, n_vocab);
}

// Disaggregated: the client of the prefill ranks (in groups the size of this engine's).
// kv: the decode side's pages (null with a remote replica, which remote_for refuses to combine with this).
std::unique_ptr<PrefillClient> prefill_client_for(const EngineConfig& config, const Model& model, const KvStorage* kv,
                                                  bool speculative) {
  Communicator* world = config.prefill_world;
  if (!world || !kv) return nullptr;
  if (world->rank() != 0) world->abort("the engine runs on rank 0; prefill ranks run serve_prefills", 1);
  if (speculative) world->abort("speculative decoding does not run with prefill/decode disaggregation yet", 1);
  const ProcessGroups* groups = model.process_groups();
  const int32_t group_size = groups ? groups->world->size() : 1;
  if (world->size() <= group_size || world->size() % group_size != 0)
    world->abort("the prefill ranks do not make groups the size of the decode group", 1);
  return std::make_unique<PrefillClient>(*world, group_size, kv->page_bytes(), config.scheduler.block_size,
                                         model.hparams().n_vocab);
}
}  // namespace

struct Engine::LocalPages {
  LocalPages(const Model& model, ThreadPool& pool, const KvCacheSpec& spec) : kv(spec), runner(model, pool, kv) {}
  KvStorage kv;
  ModelRunner runner;  // over kv
};

Engine::Engine(const Model& model, ThreadPool& pool, const EngineConfig& config, const Model* draft)
    : model_(model),
      config_(config),
      max_seq_len_(usable_seq_len(model, config)),
      pages_(config.n_blocks, config.scheduler.block_size, config.prefix_caching),
      scheduler_(pages_, config.scheduler),
      local_(config.replica_link ? nullptr : std::make_unique<LocalPages>(model, pool, model.kv_spec(config.n_blocks,
                                                                         config.scheduler.block_size, config.kv_types))),
      relay_(config.replica_link ? nullptr : relay_for(model, draft != nullptr || config.spec.ngram > 0)),
      remote_(remote_for(config, model.hparams().n_vocab, draft != nullptr || config.spec.ngram > 0)),
      prefill_(prefill_client_for(config, model, local_ ? &local_->kv : nullptr, draft != nullptr || config.spec.ngram > 0)),
      drafter_(draft ? std::make_unique<ModelDrafter>(*draft, pool, config.n_blocks, config.scheduler.block_size,
                                                      config.kv_types, config.scheduler.max_batch_tokens)
                     : nullptr),
      speculative_(draft != nullptr || config.spec.ngram > 0),
      spec_control_(config.spec.max_batch, config.spec.measured) {
  if (local_) center_keys(local_->kv, model, pool);  // a remote replica's ranks center their own keys
}

Engine::~Engine() = default;

double Engine::pipeline_wait_s() const {
  const ProcessGroups* groups = remote_ ? nullptr : model_.process_groups();  // replica 0's, not this one's
  return groups ? groups->pipeline->stats().seconds : 0.0;
}

Engine::Choice Engine::make_choice(int64_t request_id, int32_t index, std::shared_ptr<const Request> request,
                                   SamplingParams params, bool forks_pending) const {
  SamplingParams draft_params = params;
  draft_params.seed = choice_seed(params.seed, 1 << 20);  // a stream of its own
  return Choice{request_id, index, std::move(request), Sampler(params), forks_pending, Sampler(draft_params),
                AdaptiveDraftLength(config_.spec.draft_min, config_.spec.draft_max), {}};
}

Result<int64_t> Engine::add_request(Request request) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  if (request.prompt.empty()) return Error{"the prompt is empty"};
  for (int32_t t : request.prompt)
    if (t < 0 || t >= n_vocab)
      return Error{"token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")"};
  if (static_cast<int64_t>(request.prompt.size()) >= max_seq_len_)
    return Error{"the prompt has " + std::to_string(request.prompt.size()) + " tokens; this server's context is " +
                 std::to_string(max_seq_len_) + " tokens per sequence"};
  if (request.max_tokens < 1) return Error{"max_tokens must be >= 1"};
  if (request.n < 1 || request.n > 16) return Error{"n must be in [1, 16]"};
  if (request.top_logprobs < -1 || request.top_logprobs > 20) return Error{"top_logprobs must be in [0, 20]"};
  if (Status s = request.sampling.validate(); !s.ok()) return Error{s.error()};
  for (const auto& [token, bias] : request.sampling.logit_bias)
    if (token < 0 || token >= n_vocab)
      return Error{"logit_bias names token id " + std::to_string(token) + ", outside the vocabulary [0, " +
                   std::to_string(n_vocab) + ")"};

  const int64_t request_id = next_request_++;
  const int64_t seq_id = next_sequence_++;
  Sequence seq;
  seq.id = seq_id;
  seq.tokens = request.prompt;
  seq.cache_salt = request.cache_salt;
  seq.arrival_ms = clock_.elapsed_s() * 1e3;
  auto shared = std::make_shared<const Request>(std::move(request));
  choices_.emplace(seq_id, make_choice(request_id, 0, shared, shared->sampling, shared->n > 1));
  sequences_of_[request_id] = {seq_id};
  if (prefill_) {
    prefill_->submit(seq_id, seq.tokens, seq.cache_salt);
    prefilling_.emplace(seq_id, std::move(seq));
  } else {
    scheduler_.add(std::move(seq));
  }
  return request_id;
}

void Engine::cancel(int64_t request_id) {
  const auto it = sequences_of_.find(request_id);
  if (it == sequences_of_.end()) return;
  for (int64_t seq_id : it->second) {
    const Choice& choice = choices_.at(seq_id);
    StepOutput out;
    out.request_id = request_id;
    out.index = choice.index;
    out.finish = FinishReason::Cancelled;
    cancelled_.push_back(std::move(out));
    end_sequence(seq_id);
  }
  sequences_of_.erase(it);
}

void Engine::end_sequence(int64_t seq_id) {
  if (prefilling_.erase(seq_id)) prefill_->cancel(seq_id);  // its prefill rank frees its pages
  scheduler_.finish(seq_id);
  choices_.erase(seq_id);
  if (drafter_) drafter_->forget(seq_id);
}

GeneratedToken Engine::with_logprobs(const Choice& choice, int32_t token, const float* logits) const {
  GeneratedToken out;
  out.token = token;
  if (choice.request->top_logprobs < 0) return out;
  const int32_t n_vocab = model_.hparams().n_vocab;
  const float max = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  out.logprob = logits[token] - log_z;
  const int32_t k = std::min(choice.request->top_logprobs, n_vocab);
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int32_t i = 0; i < k; ++i) out.top.push_back({ids[static_cast<size_t>(i)], logits[ids[static_cast<size_t>(i)]] - log_z});
  return out;
}

int32_t Engine::propose_drafts(bool& prompt_catch_up) {
  if (!speculative_) return 0;
  std::vector<int64_t> decoding;  // running sequences with one pending token
  for (int64_t id : scheduler_.running_ids()) {
    const Sequence& seq = *scheduler_.find(id);
    if (seq.n_tokens() - seq.n_computed == 1) decoding.push_back(id);
  }
  // Past the crossover a plain step is cheaper: verifying K + 1 rows per sequence no longer hides in the
  // time the weights take to stream.
  const auto n_decoding = static_cast<int32_t>(decoding.size());
  if (!spec_control_.speculate(n_decoding)) return n_decoding;
  std::vector<DraftJob> jobs;
  for (int64_t id : decoding) {
    const Sequence& seq = *scheduler_.find(id);
    Choice& choice = choices_.at(id);
    choice.draft_dists.clear();
    if (choice.forks_pending) continue;
    // No drafts past the request's length or the context: position n_tokens - 1 + K must fit.
    const int32_t k = std::min({config_.spec.adaptive ? choice.draft_length.next() : config_.spec.draft_max,
                                choice.request->max_tokens - seq.n_generated() - 1, max_seq_len_ - seq.n_tokens()});
    if (k < std::max(1, config_.spec.draft_min)) continue;
    if (!drafter_) {
      std::vector<int32_t> drafts = ngram_draft(seq.tokens, config_.spec.ngram, k);
      if (static_cast<int32_t>(drafts.size()) >= std::max(1, config_.spec.draft_min))
        scheduler_.set_drafts(id, std::move(drafts));
      continue;
    }
    DraftJob& job = jobs.emplace_back();
    job.seq_id = id;
    job.tokens = seq.tokens;
    job.k = k;
    job.sampler = &choice.draft_sampler;
    job.grammar = choice.sampler.grammar_state();
  }
  if (jobs.empty()) return n_decoding;
  // Past the first drafts a job catches up with one or two tokens (the last kept draft, the target's own).
  prompt_catch_up = drafter_->propose(jobs) > 2 * static_cast<int32_t>(jobs.size());
  for (DraftJob& job : jobs) {
    if (static_cast<int32_t>(job.drafts.size()) < std::max(1, config_.spec.draft_min)) continue;
    choices_.at(job.seq_id).draft_dists = std::move(job.dists);
    scheduler_.set_drafts(job.seq_id, std::move(job.drafts));
  }
  return n_decoding;
}

std::vector<int32_t> Engine::next_tokens(Choice& choice, const Sequence& seq, const ScheduledChunk& c, float* rows) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  const int32_t n_drafts = c.n_logits - 1;
  if (n_drafts == 0) return {choice.sampler.sample(rows, n_vocab, seq.tokens)};
  const std::span<const int32_t> drafts(c.tokens.data() + 1, static_cast<size_t>(n_drafts));
  const std::span<const TokenDistribution> dists = drafter_ ? std::span<const TokenDistribution>(choice.draft_dists)
                                                            : std::span<const TokenDistribution>();
  const Verification v = verify_drafts(drafts, dists.first(dists.empty() ? 0 : static_cast<size_t>(n_drafts)), rows,
                                       n_vocab, seq.tokens, choice.sampler);
  spec_stats_.record(n_drafts, v.n_accepted);
  choice.draft_length.update(n_drafts, v.n_accepted);
  choice.draft_dists.clear();
  std::vector<int32_t> tokens(drafts.begin(), drafts.begin() + v.n_accepted);
  tokens.push_back(v.next);
  return tokens;
}

void Engine::emit(const ScheduledChunk& c, const float* rows, std::vector<StepOutput>& outputs) {
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  std::vector<int64_t> seq_ids = {c.seq_id};
  Choice& first = choices_.at(c.seq_id);
  if (first.forks_pending) {
    // n > 1: the other choices share this prompt's blocks from here on.
    first.forks_pending = false;
    for (int32_t i = 1; i < first.request->n; ++i) {
      const int64_t child = next_sequence_++;
      scheduler_.fork(c.seq_id, child);
      SamplingParams params = first.request->sampling;
      params.seed = choice_seed(params.seed, i);
      choices_.emplace(child, make_choice(first.request_id, i, first.request, params, false));
      sequences_of_[first.request_id].push_back(child);
      seq_ids.push_back(child);
    }
  }
  for (int64_t seq_id : seq_ids) {
    Choice& choice = choices_.at(seq_id);
    const Sequence& seq = *scheduler_.find(seq_id);
    StepOutput out;
    out.request_id = choice.request_id;
    out.index = choice.index;
    out.n_prompt = seq.n_prompt;
    out.n_cached_prompt = seq.n_cached_prompt;
    if (seq.n_generated() == 0 && seq.n_preemptions == 0 && choice.index == 0) {
      prompt_tokens_ += seq.n_prompt;
      prompt_tokens_cached_ += seq.n_cached_prompt;
    }
    // Forked choices sample from the same rows: each from a copy (and logprobs from the raw logits).
    std::vector<float> work(rows, rows + static_cast<size_t>(c.n_logits) * n_vocab);  // [c.n_logits, n_vocab]
    const std::vector<float> raw = choice.request->top_logprobs >= 0 ? work : std::vector<float>();
    const std::vector<int32_t> tokens = next_tokens(choice, seq, c, work.data());
    // Accepted drafts join the sequence (their KV is kept); then its tokens are emitted up to a stop
    // token (not emitted), the length limit, or the end of the request's grammar.
    const int32_t n_generated = seq.n_generated(), n_tokens = seq.n_tokens();
    scheduler_.accept_drafts(seq_id, static_cast<int32_t>(tokens.size()) - 1);
    for (size_t i = 0; i < tokens.size() && out.finish == FinishReason::None; ++i) {
      const auto& stops = choice.request->stop_tokens;
      // -1: a grammar that no token can continue.
      if (tokens[i] < 0 || std::find(stops.begin(), stops.end(), tokens[i]) != stops.end()) {
        out.finish = FinishReason::Stop;
        break;
      }
      out.tokens.push_back(with_logprobs(choice, tokens[i], raw.empty() ? nullptr : raw.data() + i * n_vocab));
      ++generated_tokens_;
      choice.sampler.accept(tokens[i]);
      const auto n_out = static_cast<int32_t>(out.tokens.size());
      if (n_generated + n_out >= choice.request->max_tokens || n_tokens + n_out >= max_seq_len_)
        out.finish = FinishReason::Length;
      if (choice.sampler.grammar_finished()) out.finish = FinishReason::Stop;
    }
    if (out.finish == FinishReason::None) scheduler_.append_token(seq_id, tokens.back());
    if (out.finish != FinishReason::None) {
      end_sequence(seq_id);
      auto& ids = sequences_of_[out.request_id];
      ids.erase(std::find(ids.begin(), ids.end(), seq_id));
      if (ids.empty()) sequences_of_.erase(out.request_id);
    }
    outputs.push_back(std::move(out));
  }
}

void Engine::admit_prefilled(std::vector<StepOutput>& outputs) {
  for (PrefilledPrompt& p : prefill_->poll()) prefilled_.push_back(std::move(p));
  while (!prefilled_.empty()) {
    PrefilledPrompt& p = prefilled_.front();
    const auto it = prefilling_.find(p.seq_id);
    if (it == prefilling_.end()) {  // cancelled after it arrived
      prefilled_.pop_front();
      continue;
    }
    it->second.n_cached_prompt = p.n_cached;
    if (!scheduler_.add_prefilled(it->second)) break;  // waits (in order) for pages or a place in the running set
    prefilling_.erase(it);
    const std::vector<int32_t>& table = pages_.pages(p.seq_id);
    const size_t page_bytes = local_->kv.page_bytes();
    for (size_t i = 0; i < table.size(); ++i) local_->kv.import_page(table[i], p.pages[0].data() + i * page_bytes);
    if (p.pages.size() > 1) {  // the decode group's other ranks import theirs with the next plan
      imported_pages_.insert(imported_pages_.end(), table.begin(), table.end());
      imported_shares_.resize(p.pages.size());
      for (size_t r = 1; r < p.pages.size(); ++r) {
        std::vector<uint8_t>& share = imported_shares_[r];  // rank r's bytes of the next plan's imports
        if (share.empty()) share = std::move(p.pages[r]);  // the step's first prompt: no copy
        else share.insert(share.end(), p.pages[r].begin(), p.pages[r].end());
      }
    }
    const Sequence& seq = *scheduler_.find(p.seq_id);
    ScheduledChunk c;  // as if its prompt's last token had run here
    c.seq_id = p.seq_id;
    c.start = seq.n_tokens() - 1;
    c.tokens = {seq.tokens.back()};
    c.pages = table;
    c.n_logits = 1;
    emit(c, p.logits.data(), outputs);
    prefilled_.pop_front();
  }
}

std::vector<StepOutput> Engine::step() {
  std::vector<StepOutput> outputs;
  outputs.swap(cancelled_);
  const double start_s = clock_.elapsed_s();
  if (prefill_) admit_prefilled(outputs);
  bool prompt_catch_up = false;
  const int32_t n_decoding = propose_drafts(prompt_catch_up);
  StepPlan plan = scheduler_.schedule(clock_.elapsed_s() * 1e3);
  plan.imported_pages.swap(imported_pages_);  // the prompts admitted above: filled first on the other ranks
  if (plan.empty() && plan.imported_pages.empty()) return outputs;
  if (relay_) relay_->send(plan, &imported_shares_);  // a plan that only imports, when nothing runs
  imported_shares_.clear();
  if (plan.empty()) return outputs;
  ++steps_;
  const double forward_start_s = clock_.elapsed_s(), waited_before_s = pipeline_wait_s();
  std::vector<float> logits = local_ ? local_->runner.run(plan) : remote_->run(plan);  // [plan.n_logits(), n_vocab]
  forward_s_ += clock_.elapsed_s() - forward_start_s;
  step_pipeline_wait_s_ += pipeline_wait_s() - waited_before_s;
  peak_running_ = std::max(peak_running_, scheduler_.n_running());
  if (pages_.pool().n_in_use() > peak_blocks_used_) {
    peak_blocks_used_ = pages_.pool().n_in_use();
    peak_unused_tokens_ = static_cast<int64_t>(peak_blocks_used_) * config_.scheduler.block_size - kv_tokens_filled();
  }
  scheduler_.commit(plan);
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  size_t row = 0;
  bool decode_only = true;  // every chunk a decode or a verification
  for (const ScheduledChunk& c : plan.chunks) {
    decode_only = decode_only && c.n_logits == c.n_tokens();
    if (!c.samples()) continue;
    emit(c, logits.data() + row * n_vocab, outputs);  // [c.n_logits, n_vocab]: the chunk's last tokens'
    row += static_cast<size_t>(c.n_logits);
  }
  if (decode_only) {
    decode_step_s_ += clock_.elapsed_s() - start_s;
    ++decode_steps_;
  }
  if (speculative_) {
    // Pure decode steps tell the controller what a token cost.
    bool speculated = false;
    for (const ScheduledChunk& c : plan.chunks) speculated = speculated || c.n_logits > 1;
    int32_t n_tokens = 0;
    for (const StepOutput& o : outputs) n_tokens += static_cast<int32_t>(o.tokens.size());
    if (decode_only && !prompt_catch_up) spec_control_.record(n_decoding, speculated, clock_.elapsed_s() - start_s, n_tokens);
  }
  return outputs;
}

int64_t Engine::kv_tokens_filled() const {
  std::map<int32_t, int32_t> filled;  // block id -> positions holding tokens
  const int32_t bs = config_.scheduler.block_size;
  for (int64_t id : scheduler_.running_ids()) {
    const Sequence& seq = *scheduler_.find(id);
    const auto& ids = pages_.pages(id);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t n = std::clamp(seq.n_tokens() - static_cast<int32_t>(i) * bs, 0, bs);
      filled[ids[i]] = std::max(filled[ids[i]], n);
    }
  }
  int64_t total = 0;
  for (const auto& [block, n] : filled) total += n;
  return total;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.n_waiting = scheduler_.n_waiting() + prefilling_.size();
  s.n_running = scheduler_.n_running();
  s.kv_block_size = config_.scheduler.block_size;
  const BlockPool& pool = pages_.pool();
  s.kv_blocks_total = pool.n_blocks();
  s.kv_blocks_used = pool.n_in_use();
  s.kv_blocks_cached = pool.n_cached();
  s.kv_blocks_free = pool.n_free();
  s.kv_tokens_used = kv_tokens_filled();
  if (local_) s.expert_tokens = local_->runner.expert_tokens();
  s.forward_seconds = forward_s_;
  s.decode_step_seconds = decode_step_s_;
  s.decode_steps = decode_steps_;
  if (prefill_) s.disaggregation = prefill_->stats();
  if (const ProcessGroups* groups = model_.process_groups()) {
    s.tensor_parallel_ranks = groups->tp();
    s.pipeline_stages = groups->pp();
    s.expert_parallel_ranks = groups->ep();
    s.context_parallel_ranks = groups->cp();
    // A remote replica's messages are its link's (replica 0's groups belong to another engine's thread).
    s.comm = remote_ ? remote_->stats() : groups->stats();
    s.pipeline_wait_seconds = step_pipeline_wait_s_;
  }
  // As on rank 0 of the replica (a remote replica's pages are there, of the same spec).
  const KvCacheSpec kv_spec = local_ ? local_->kv.spec()
                                     : model_.kv_spec(config_.n_blocks, config_.scheduler.block_size, config_.kv_types);
  s.kv_bytes_per_token = static_cast<int64_t>(kv_spec.bytes_per_token());
  s.kv_bytes = static_cast<int64_t>(kv_spec.bytes());
  s.kv_peak_blocks_used = peak_blocks_used_;
  s.peak_running = peak_running_;
  s.kv_peak_unused_tokens = peak_unused_tokens_;
  s.prompt_tokens = prompt_tokens_;
  s.prompt_tokens_cached = prompt_tokens_cached_;
  s.generated_tokens = generated_tokens_;
  s.preemptions = scheduler_.n_preemptions();
  s.steps = steps_;
  s.speculative = speculative_;
  s.spec = spec_stats_;
  return s;
}

}  // namespace kestrel
