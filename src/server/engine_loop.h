// The one thread that drives the Engine. HTTP threads never touch the engine: they submit requests and
// cancellations through an inbox and read results from their RequestChannel. With an Embedder (sharing
// the engine's model and threads) it also computes embedding jobs, between steps.
//
// Contract: submit/cancel/stats are thread-safe. submit() refuses (returns false) when max_pending
// requests are already queued or running, so the server can answer 503 at once. stop() ends the thread:
// with finish_in_flight it first lets accepted requests complete (new submissions are refused), otherwise
// it cancels them.
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/embedder.h"
#include "engine/engine.h"
#include "server/request_channel.h"
#include "server/request_queue.h"

namespace kestrel {

class EngineLoop final : public RequestQueue, public EmbeddingQueue {
 public:
  // on_step(outputs, stats) runs on the engine thread after every step (metrics).
  using StepObserver = std::function<void(const std::vector<StepOutput>&, const EngineStats&)>;
  // embedder: computes embedding jobs on the engine thread (null: submit_embeddings refuses).
  EngineLoop(Engine& engine, size_t max_pending, StepObserver on_step = {}, Embedder* embedder = nullptr);
  ~EngineLoop() override;

  void start();
  void stop(bool finish_in_flight);

  bool submit(Request request, std::shared_ptr<RequestChannel> channel) override;
  void cancel(const std::shared_ptr<RequestChannel>& channel) override;  // also marks the channel cancelled
  // Counts against max_pending like a request; its promise is always fulfilled (refused when stopping).
  bool submit_embeddings(std::shared_ptr<EmbeddingJob> job) override;
  EngineStats stats() const;
  size_t n_pending() const override;
  size_t max_pending() const override { return max_pending_; }

 private:
  void run();
  void run_embeddings(std::vector<std::shared_ptr<EmbeddingJob>>& jobs, bool stop_now);

  Engine& engine_;
  size_t max_pending_;
  StepObserver on_step_;
  Embedder* embedder_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<Request, std::shared_ptr<RequestChannel>>> inbox_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  std::vector<std::shared_ptr<EmbeddingJob>> embeddings_;
  size_t n_active_ = 0;  // accepted and not finished (guarded by mutex_)
  bool stopping_ = false, draining_ = false;
  EngineStats stats_;    // copied after each step (guarded by mutex_)
  std::thread thread_;
  // Engine thread only:
  std::map<int64_t, std::shared_ptr<RequestChannel>> channel_of_;     // request id -> channel
  std::map<const RequestChannel*, int64_t> request_of_;               // channel -> request id
  std::map<int64_t, int32_t> open_choices_;                           // request id -> choices not finished
};

}  // namespace kestrel
