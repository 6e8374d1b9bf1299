// Waiting on another process without holding a core: naps that start short and double up to a bound, so a
// message that comes soon is seen soon and a long wait costs no CPU. Used by the patient communicator calls
// and the message channel's thread.
#pragma once
#include <algorithm>
#include <chrono>
#include <thread>

namespace kestrel {

class Backoff {
 public:
  Backoff(std::chrono::microseconds first, std::chrono::microseconds longest) : first_(first), longest_(longest), next_(first) {}
  // Sleeps for the current nap, then doubles it (up to the bound).
  void nap() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(next_ * 2, longest_);
  }
  // Something happened: the next nap is the first one again.
  void reset() { next_ = first_; }

 private:
  std::chrono::microseconds first_, longest_, next_;
};

}  // namespace kestrel
