#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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
}  // namespace

Engine::Engine(const Model& model, ThreadPool& pool, const EngineConfig& config)
    : model_(model),
      config_(config),
      max_seq_len_(usable_seq_len(model, config)),
      pages_(config.n_blocks, config.scheduler.block_size, config.prefix_caching),
      kv_(model.kv_spec(config.n_blocks, config.scheduler.block_size, config.kv_type)),
      scheduler_(pages_, config.scheduler),
      runner_(model, pool, kv_) {}

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
  choices_.emplace(seq_id, Choice{request_id, 0, shared, Sampler(shared->sampling), shared->n > 1});
  sequences_of_[request_id] = {seq_id};
  scheduler_.add(std::move(seq));
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
    scheduler_.finish(seq_id);
    choices_.erase(seq_id);
  }
  sequences_of_.erase(it);
}

GeneratedToken Engine::sample(Choice& choice, const Sequence& seq, const float* logits) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  std::vector<float> work(logits, logits + n_vocab);  // [n_vocab] the sampler edits its copy
  GeneratedToken out;
  out.token = choice.sampler.sample(work.data(), n_vocab, seq.tokens);
  if (choice.request->top_logprobs >= 0) {
    const float max = *std::max_element(logits, logits + n_vocab);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
    const float log_z = max + static_cast<float>(std::log(sum));
    out.logprob = logits[out.token] - log_z;
    const int32_t k = std::min(choice.request->top_logprobs, n_vocab);
    std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int32_t i = 0; i < k; ++i) out.top.push_back({ids[static_cast<size_t>(i)], logits[ids[static_cast<size_t>(i)]] - log_z});
  }
  return out;
}

FinishReason Engine::finish_reason(const Choice& choice, const Sequence& seq, int32_t token) const {
  const auto& stops = choice.request->stop_tokens;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return FinishReason::Stop;
  if (seq.n_generated() >= choice.request->max_tokens || seq.n_tokens() >= max_seq_len_) return FinishReason::Length;
  return FinishReason::None;
}

std::vector<StepOutput> Engine::step() {
  std::vector<StepOutput> outputs;
  outputs.swap(cancelled_);
  const StepPlan plan = scheduler_.schedule(clock_.elapsed_s() * 1e3);
  if (plan.empty()) return outputs;
  ++steps_;
  const std::vector<float> logits = runner_.run(plan);  // [plan.n_logits(), n_vocab]
  if (pages_.pool().n_in_use() > peak_blocks_used_) {
    peak_blocks_used_ = pages_.pool().n_in_use();
    peak_unused_tokens_ = static_cast<int64_t>(peak_blocks_used_) * config_.scheduler.block_size - kv_tokens_filled();
  }
  scheduler_.commit(plan);
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  size_t row = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.samples()) continue;
    row += static_cast<size_t>(c.n_logits);
    const float* row_logits = logits.data() + (row - 1) * n_vocab;  // the chunk's last token's
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
        choices_.emplace(child, Choice{first.request_id, i, first.request, Sampler(params), false});
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
      GeneratedToken token = sample(choice, seq, row_logits);
      out.finish = finish_reason(choice, seq, token.token);
      if (out.finish != FinishReason::Stop) {
        scheduler_.append_token(seq_id, token.token);
        out.tokens.push_back(std::move(token));
        ++generated_tokens_;
        out.finish = finish_reason(choice, *scheduler_.find(seq_id), -1);
      }
      if (out.finish != FinishReason::None) {
        scheduler_.finish(seq_id);
        choices_.erase(seq_id);
        auto& ids = sequences_of_[out.request_id];
        ids.erase(std::find(ids.begin(), ids.end(), seq_id));
        if (ids.empty()) sequences_of_.erase(out.request_id);
      }
      outputs.push_back(std::move(out));
    }
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
  s.n_waiting = scheduler_.n_waiting();
  s.n_running = scheduler_.n_running();
  s.kv_block_size = config_.scheduler.block_size;
  const BlockPool& pool = pages_.pool();
  s.kv_blocks_total = pool.n_blocks();
  s.kv_blocks_used = pool.n_in_use();
  s.kv_blocks_cached = pool.n_cached();
  s.kv_blocks_free = pool.n_free();
  s.kv_tokens_used = kv_tokens_filled();
  s.kv_peak_blocks_used = peak_blocks_used_;
  s.kv_peak_unused_tokens = peak_unused_tokens_;
  s.prompt_tokens = prompt_tokens_;
  s.prompt_tokens_cached = prompt_tokens_cached_;
  s.generated_tokens = generated_tokens_;
  s.preemptions = scheduler_.n_preemptions();
  s.steps = steps_;
  return s;
}

}  // namespace kestrel
