#include "server/engine_loop.h"

namespace kestrel {

EngineLoop::EngineLoop(Engine& engine, size_t max_pending, StepObserver on_step, Embedder* embedder)
    : engine_(engine), max_pending_(max_pending), on_step_(std::move(on_step)), embedder_(embedder) {}

EngineLoop::~EngineLoop() { stop(false); }

void EngineLoop::start() { thread_ = std::thread([this] { run(); }); }

void EngineLoop::stop(bool finish_in_flight) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    (finish_in_flight ? draining_ : stopping_) = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool EngineLoop::submit(Request request, std::shared_ptr<RequestChannel> channel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || draining_ || n_active_ >= max_pending_) return false;
    ++n_active_;
    inbox_.emplace_back(std::move(request), std::move(channel));
  }
  wake_.notify_all();
  return true;
}

bool EngineLoop::submit_embeddings(std::shared_ptr<EmbeddingJob> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!embedder_ || stopping_ || draining_ || n_active_ >= max_pending_) return false;
    ++n_active_;
    embeddings_.push_back(std::move(job));
  }
  wake_.notify_all();
  return true;
}

// Every job queued since the last step, one after another (each input's vector is the same whatever
// it is batched with: engine/embedder.h).
void EngineLoop::run_embeddings(std::vector<std::shared_ptr<EmbeddingJob>>& jobs, bool stop_now) {
  for (const auto& job : jobs) {
    if (stop_now) {
      job->vectors.set_value(Error{"the server is shutting down"});
      continue;
    }
    try {
      job->vectors.set_value(embedder_->embed(job->inputs));
    } catch (const std::exception& e) {  // (allocation failure): the request fails, the server goes on
      job->vectors.set_value(Error{std::string("embedding failed: ") + e.what()});
    }
  }
}

void EngineLoop::cancel(const std::shared_ptr<RequestChannel>& channel) {
  channel->cancel();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(channel);
  }
  wake_.notify_all();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

size_t EngineLoop::n_pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return n_active_;
}

void EngineLoop::run() {
  bool idle = false;  // the last step ran nothing although work is queued (a batch policy is waiting)
  for (;;) {
    std::vector<std::pair<Request, std::shared_ptr<RequestChannel>>> inbox;
    std::vector<std::shared_ptr<RequestChannel>> cancels;
    std::vector<std::shared_ptr<EmbeddingJob>> embeddings;
    bool stop_now = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto has_input = [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || !embeddings_.empty(); };
      const auto woken = [&] { return has_input() || (draining_ && n_active_ == 0); };
      if (!engine_.has_work() && engine_.polls_while_idle()) {
        wake_.wait_for(lock, std::chrono::milliseconds(50), woken);
      } else if (!engine_.has_work()) {
        wake_.wait(lock, woken);
      } else if (idle) {
        wake_.wait_for(lock, std::chrono::milliseconds(1), has_input);
      }
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      embeddings.swap(embeddings_);
      stop_now = stopping_ || (draining_ && n_active_ == 0 && inbox.empty() && embeddings.empty());
    }
    run_embeddings(embeddings, stop_now);
    size_t n_done = embeddings.size();  // requests that left this round
    for (auto& [request, channel] : inbox) {
      if (stop_now || channel->cancelled()) {
        if (stop_now) channel->push({ChannelEvent::Kind::ShuttingDown, "the server is shutting down", {}});
        else channel->push({ChannelEvent::Kind::Rejected, "cancelled", {}});
        ++n_done;
        continue;
      }
      const int32_t n = request.n;
      auto id = engine_.add_request(std::move(request));
      if (!id.ok()) {
        channel->push({ChannelEvent::Kind::Rejected, id.error(), {}});
        ++n_done;
        continue;
      }
      channel_of_[*id] = channel;
      request_of_[channel.get()] = *id;
      open_choices_[*id] = n;
      channel->push({ChannelEvent::Kind::Accepted, "", {}});
    }
    for (const auto& channel : cancels)
      if (const auto it = request_of_.find(channel.get()); it != request_of_.end()) engine_.cancel(it->second);
    if (stop_now)
      for (const auto& [id, channel] : channel_of_) engine_.cancel(id);

    const std::vector<StepOutput> outputs = engine_.step();
    idle = outputs.empty();
    for (const StepOutput& out : outputs) {
      const auto it = channel_of_.find(out.request_id);
      if (it == channel_of_.end()) continue;
      const std::shared_ptr<RequestChannel> channel = it->second;
      channel->push({ChannelEvent::Kind::Output, "", out});
      if (out.finish != FinishReason::None && --open_choices_[out.request_id] == 0) {
        open_choices_.erase(out.request_id);
        request_of_.erase(channel.get());
        channel_of_.erase(it);
        ++n_done;
      }
    }
    const EngineStats stats = engine_.stats();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      n_active_ -= n_done;
      stats_ = stats;
    }
    if (on_step_ && (!outputs.empty() || engine_.polls_while_idle())) on_step_(outputs, stats);
    if (stop_now && channel_of_.empty()) break;
  }
}

}  // namespace kestrel
