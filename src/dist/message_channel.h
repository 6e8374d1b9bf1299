// Point-to-point messages moved by a thread of their own (prefill/decode disaggregation). MPI moves a large
// message only while its ranks are inside MPI calls, so a rank busy computing for a while would stall its
// transfers (the sender's and the receiver's); this thread keeps them moving while the owner computes:
// posted messages go out in the background, arriving ones are received whole into an inbox.
//
// Contract: while a channel lives, its thread makes every call on the communicator (the owner makes none:
// MPI may be initialised only MPI_THREAD_SERIALIZED). post/take are thread-safe. Messages from one rank to another
// arrive in the order posted. Destroying the channel waits until everything posted was sent.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace kestrel {

class MessageChannel {
 public:
  struct Message {
    int source = 0;
    std::vector<uint8_t> bytes;  // [bytes] as posted
  };

  explicit MessageChannel(Communicator& comm);
  ~MessageChannel();
  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;

  void post(std::vector<uint8_t> message, int dest);
  // The next message received, if one is there.
  std::optional<Message> take();
  // The same, waiting up to timeout for one.
  std::optional<Message> take(std::chrono::milliseconds timeout);

 private:
  void run();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<std::pair<std::vector<uint8_t>, int>> outbox_;  // (message, dest), guarded by mutex_
  std::deque<Message> inbox_;                                // guarded by mutex_
  bool stopping_ = false;                                    // guarded by mutex_
  std::thread thread_;
};

}  // namespace kestrel
