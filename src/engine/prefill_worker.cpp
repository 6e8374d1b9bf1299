#include "engine/prefill_worker.h"

#include <chrono>
#include <map>
#include <memory>

#include "core/timer.h"
#include "dist/message_channel.h"
#include "engine/model_runner.h"
#include "engine/prefill_messages.h"
#include "engine/scheduler.h"
#include "engine/step_plan_relay.h"
#include "kv/kv_manager.h"
#include "kv/kv_storage.h"
#include "model/key_centers.h"

namespace kestrel {
namespace {

// After a plan's forward pass: this rank's share of the pages the plan exports, to rank 0.
void send_exported_pages(MessageChannel& channel, KvStorage& kv, const StepPlan& plan) {
  const size_t page_bytes = kv.page_bytes();
  for (const PageExport& e : plan.exports) {
    PrefillMessage m = prefill_message(PrefillMessageKind::Pages, e.seq_id);
    m.first_page = e.first_page;
    m.pages.resize(e.pages.size() * page_bytes);  // [pages][page_bytes]
    for (size_t i = 0; i < e.pages.size(); ++i) kv.export_page(e.pages[i], m.pages.data() + i * page_bytes);
    channel.post(encode_prefill_message(m), 0);
  }
}

class PrefillWorker {
 public:
  PrefillWorker(Communicator& world, Communicator& group, const Model& model, ThreadPool& pool, const EngineConfig& config)
      : world_(world),
        channel_(world),
        n_vocab_(model.hparams().n_vocab),
        block_size_(config.scheduler.block_size),
        pages_(config.n_blocks, config.scheduler.block_size, config.prefix_caching),
        kv_(model.kv_spec(config.n_blocks, config.scheduler.block_size, config.kv_types)),
        scheduler_(pages_, config.scheduler),
        runner_(model, pool, kv_),
        relay_(group.size() > 1 ? std::make_unique<StepPlanRelay>(group) : nullptr) {
    center_keys(kv_, model, pool);  // as rank 0's engine does: the pages' bytes mean the same on both sides
  }

  int64_t run() {
    for (;;) {
      if (!receive(/*wait=*/!scheduler_.has_work())) break;
      if (scheduler_.has_work()) step();
      if (changed_) send_stats();
    }
    send(prefill_message(PrefillMessageKind::Stopped));  // the channel's end waits until it is sent
    return n_done_;
  }

 private:
  struct Job {
    double arrival_ms = 0, admitted_ms = -1;
    int32_t pages_sent = 0;  // of its page table, in order
  };

  void send(const PrefillMessage& m) { channel_.post(encode_prefill_message(m), 0); }

  // Handles rank 0's messages; with wait, waits until one comes. False after Stop.
  bool receive(bool wait) {
    for (;;) {
      const auto incoming = wait ? channel_.take(std::chrono::milliseconds(1000)) : channel_.take();
      if (!incoming) {
        if (!wait) return true;
        continue;
      }
      if (incoming->source != 0) world_.abort("prefill rank: a message from rank " + std::to_string(incoming->source), 1);
      auto m = decode_prefill_message(incoming->bytes);
      if (!m.ok()) world_.abort("prefill rank: " + m.error(), 1);
      changed_ = true;
      switch (m->kind) {
        case PrefillMessageKind::Job: {
          Sequence seq;
          seq.id = m->seq_id;
          seq.tokens = std::move(m->tokens);
          seq.cache_salt = std::move(m->cache_salt);
          seq.arrival_ms = clock_.elapsed_s() * 1e3;
          jobs_[seq.id] = Job{seq.arrival_ms, -1, 0};
          scheduler_.add(std::move(seq));
          break;
        }
        case PrefillMessageKind::Cancel:
          if (jobs_.erase(m->seq_id)) scheduler_.finish(m->seq_id);  // its pages go back (computed ones cached)
          break;
        case PrefillMessageKind::Stop:
          return false;
        default:
          world_.abort("prefill rank: unexpected message kind " + std::to_string(static_cast<int>(m->kind)) + " from rank 0", 1);
      }
      wait = false;  // one message handled: take the others that are there, then compute
    }
  }

  void step() {
    StepPlan plan = scheduler_.schedule(clock_.elapsed_s() * 1e3);
    if (plan.empty()) return;
    changed_ = true;
    const double now_ms = clock_.elapsed_s() * 1e3;
    for (const ScheduledChunk& c : plan.chunks) {
      Job& job = jobs_.at(c.seq_id);
      if (job.admitted_ms < 0) job.admitted_ms = now_ms;
      // The pages the chunk completes leave once it ran (part-way through a prompt while its next chunk
      // computes); the prompt's last chunk sends the last, part-filled page too.
      const int32_t end = c.start + c.n_tokens();
      const int32_t n_pages = c.samples() ? (end + block_size_ - 1) / block_size_ : end / block_size_;
      if (n_pages <= job.pages_sent) continue;
      plan.exports.push_back({c.seq_id, job.pages_sent, std::vector<int32_t>(c.pages.begin() + job.pages_sent,
                                                                             c.pages.begin() + n_pages)});
      job.pages_sent = n_pages;
    }
    if (relay_) relay_->send(plan);
    const double start_s = clock_.elapsed_s();
    const std::vector<float> logits = runner_.run(plan);  // [plan.n_logits(), n_vocab]
    forward_s_ += clock_.elapsed_s() - start_s;
    ++steps_;
    send_exported_pages(channel_, kv_, plan);
    scheduler_.commit(plan);
    size_t row = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.samples()) continue;
      const Sequence& seq = *scheduler_.find(c.seq_id);
      Job& job = jobs_.at(c.seq_id);
      PrefillMessage done = prefill_message(PrefillMessageKind::Done, c.seq_id);
      done.logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(row * n_vocab_),
                         logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * n_vocab_));
      done.n_cached = seq.n_cached_prompt;
      done.queue_ms = job.admitted_ms - job.arrival_ms;
      done.compute_ms = clock_.elapsed_s() * 1e3 - job.admitted_ms;
      send(done);
      prompt_tokens_ += seq.n_prompt;
      prompt_tokens_cached_ += seq.n_cached_prompt;
      ++row;
      ++n_done_;
      jobs_.erase(c.seq_id);
      scheduler_.finish(c.seq_id);  // its pages stay in the prefix cache
    }
  }

  void send_stats() {
    const BlockPool& pool = pages_.pool();
    PrefillMessage m = prefill_message(PrefillMessageKind::Stats);
    m.stats = {pool.n_blocks(), pool.n_in_use(), pool.n_cached(), static_cast<int32_t>(scheduler_.n_waiting()),
               static_cast<int32_t>(scheduler_.n_running()), prompt_tokens_, prompt_tokens_cached_, steps_, forward_s_};
    send(m);
    changed_ = false;
  }

  Communicator& world_;
  MessageChannel channel_;  // makes every call on world_ while the worker runs
  size_t n_vocab_;
  int32_t block_size_;
  KvManager pages_;
  KvStorage kv_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::unique_ptr<StepPlanRelay> relay_;  // a group of several ranks: the plans go to the others first
  Timer clock_;
  std::map<int64_t, Job> jobs_;  // by rank 0's sequence id
  bool changed_ = true;          // state changed since the last Stats message
  int64_t n_done_ = 0, prompt_tokens_ = 0, prompt_tokens_cached_ = 0, steps_ = 0;
  double forward_s_ = 0;
};

}  // namespace

int64_t serve_prefills(Communicator& job, Communicator& group, const Model& model, ThreadPool& pool,
                       const EngineConfig& config) {
  return PrefillWorker(job, group, model, pool, config).run();
}

void follow_prefills(Communicator& job, Communicator& group, const Model& model, ThreadPool& pool,
                     const EngineConfig& config) {
  MessageChannel channel(job);  // makes every call on job while this rank follows
  KvStorage kv(model.kv_spec(config.n_blocks, config.scheduler.block_size, config.kv_types));  // the leader's page ids
  center_keys(kv, model, pool);  // with the leader (a collective forward for quantized K)
  ModelRunner runner(model, pool, kv);
  follow_step_plans(group, runner, [&](const StepPlan& plan) { send_exported_pages(channel, kv, plan); });
  channel.post(encode_prefill_message(prefill_message(PrefillMessageKind::Stopped)), 0);
}

}  // namespace kestrel
