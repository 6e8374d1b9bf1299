// What flows from the engine thread to one HTTP request's thread: first whether the engine accepted the
// request (or why not), then its step outputs until every choice has finished. The HTTP side may mark
// the channel cancelled (client gone); the engine thread then cancels the request within one step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine.h"

namespace kestrel {

struct ChannelEvent {
  // ShuttingDown: the engine stopped before it took the request (a refusal like a full queue's, not the
  // request's fault).
  enum class Kind { Accepted, Rejected, ShuttingDown, Output } kind = Kind::Output;
  std::string error;  // Rejected: why
  StepOutput output;  // Output
};

class RequestChannel {
 public:
  void push(ChannelEvent event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(std::move(event));
    }
    ready_.notify_one();
  }
  // The next event, or nullopt after `timeout` without one.
  std::optional<ChannelEvent> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    ChannelEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChannelEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace kestrel
