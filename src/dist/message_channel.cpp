#include "dist/message_channel.h"

#include "dist/backoff.h"

namespace kestrel {

MessageChannel::MessageChannel(Communicator& comm) : comm_(comm), thread_([this] { run(); }) {}

MessageChannel::~MessageChannel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  thread_.join();
}

void MessageChannel::post(std::vector<uint8_t> message, int dest) {
  std::lock_guard<std::mutex> lock(mutex_);
  outbox_.emplace_back(std::move(message), dest);
}

std::optional<MessageChannel::Message> MessageChannel::take() { return take(std::chrono::milliseconds(0)); }

std::optional<MessageChannel::Message> MessageChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (inbox_.empty() && timeout.count() > 0) arrived_.wait_for(lock, timeout, [&] { return !inbox_.empty(); });
  if (inbox_.empty()) return std::nullopt;
  Message m = std::move(inbox_.front());
  inbox_.pop_front();
  return m;
}

void MessageChannel::run() {
  Backoff backoff(std::chrono::microseconds(10), std::chrono::microseconds(1000));
  for (;;) {
    std::deque<std::pair<std::vector<uint8_t>, int>> outgoing;
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      outgoing.swap(outbox_);
      stopping = stopping_;
    }
    bool busy = !outgoing.empty();
    for (auto& [message, dest] : outgoing) comm_.send_async(std::move(message), dest);
    const size_t sending = comm_.sends_in_flight();  // also moves them on
    while (const auto incoming = comm_.probe(Communicator::kAnySource)) {
      Message m{incoming->source, std::vector<uint8_t>(incoming->bytes)};
      comm_.recv(m.bytes.data(), m.bytes.size(), m.source);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        inbox_.push_back(std::move(m));
      }
      arrived_.notify_all();
      busy = true;
    }
    if (stopping && sending == 0 && outgoing.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (outbox_.empty()) return;
      continue;
    }
    // While messages are moving, check again soon; idle, back off to a millisecond.
    if (busy || sending > 0) backoff.reset();
    backoff.nap();
  }
}

}  // namespace kestrel
