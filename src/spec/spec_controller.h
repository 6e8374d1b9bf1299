// Whether a serving step speculates, decided by measurement: for each number of decoding sequences, the
// engine reports how long its steps took per generated token with and without drafts, and the cheaper
// mode is chosen; the other is tried again now and then, since acceptance and load drift. So the
// crossover (the batch size past which verifying K + 1 rows per sequence no longer hides in the time
// the weights take to stream) is found on the machine and model at hand rather than assumed.
//
// Contract: one thread calls everything. Deterministic given the reported timings.
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel {

class SpeculationController {
 public:
  // max_batch: never speculate with more decoding sequences than this. explore_every: at a batch size
  // whose cheaper mode is known, every explore_every-th step tries the other.
  // measured = false: always speculate up to max_batch.
  explicit SpeculationController(int32_t max_batch, bool measured = true, int32_t explore_every = 32)
      : max_batch_(max_batch), measured_(measured), explore_every_(explore_every), stats_(static_cast<size_t>(max_batch > 0 ? max_batch : 0) + 1) {}

  // Whether the next step, with n_decoding sequences decoding, should draft.
  bool speculate(int32_t n_decoding) {
    if (n_decoding < 1 || n_decoding > max_batch_) return false;
    if (!measured_) return true;
    Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    ++b.steps;
    // Until both modes are measured, alternate (speculation first).
    if (b.spec.n < kWarmup || b.plain.n < kWarmup) return b.spec.n <= b.plain.n;
    const bool spec_cheaper = b.spec.seconds_per_token <= b.plain.seconds_per_token;
    return b.steps % explore_every_ == 0 ? !spec_cheaper : spec_cheaper;
  }

  // A pure decode step (no prompt tokens) with n_decoding sequences took `seconds` for n_tokens generated
  // tokens; `speculated`: it verified drafts.
  void record(int32_t n_decoding, bool speculated, double seconds, int32_t n_tokens) {
    if (n_decoding < 1 || n_decoding > max_batch_ || n_tokens <= 0) return;
    Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    Mode& m = speculated ? b.spec : b.plain;
    const double x = seconds / n_tokens;
    m.seconds_per_token = m.n == 0 ? x : m.seconds_per_token + kAlpha * (x - m.seconds_per_token);
    ++m.n;
  }

  // Measured seconds per token at n_decoding sequences (0 when unmeasured), for /metrics and tests.
  double seconds_per_token(int32_t n_decoding, bool speculated) const {
    if (n_decoding < 1 || n_decoding > max_batch_) return 0;
    const Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    return (speculated ? b.spec : b.plain).seconds_per_token;
  }

 private:
  static constexpr int32_t kWarmup = 3;  // steps measured in each mode before choosing
  static constexpr double kAlpha = 0.1;  // weight of the newest step in the running mean
  struct Mode {
    int64_t n = 0;
    double seconds_per_token = 0;
  };
  struct Bucket {
    int64_t steps = 0;
    Mode spec, plain;
  };
  int32_t max_batch_;
  bool measured_;
  int32_t explore_every_;
  std::vector<Bucket> stats_;  // [n_decoding]
};

}  // namespace kestrel
