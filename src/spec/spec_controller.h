// Whether a serving step speculates, decided by measurement: for each number of decoding sequences, the
// engine reports how long its steps took per generated token with and without drafts, and the cheaper
// mode is chosen; the other is tried again now and then, since acceptance and load drift. So the
// crossover (the batch size past which verifying K + 1 rows per sequence no longer hides in the time
// the weights take to stream) is found on the machine and model at hand rather than assumed.
//
// Contract: one thread calls everything. Deterministic given the reported timings.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace kestrel {

class SpeculationController {
 public:
  // max_batch: never speculate with more decoding sequences than this. explore_every: at a batch size
  // whose cheaper mode is known, how many steps pass before the other is tried again; each try that
  // confirms the choice doubles the wait (up to kMaxExploreInterval), one that overturns it resets it.
  // measured = false: always speculate up to max_batch.
  explicit SpeculationController(int32_t max_batch, bool measured = true, int32_t explore_every = 32)
      : max_batch_(max_batch),
        measured_(measured),
        explore_every_(explore_every),
        stats_(static_cast<size_t>(max_batch > 0 ? max_batch : 0) + 1, Bucket{.interval = explore_every}) {}

  // Whether the next step, with n_decoding sequences decoding, should draft. A try of the other mode lasts
  // until kTrySamples of its steps are recorded (up to kExploreSteps steps: switching to speculation first
  // makes the draft model catch up with the tokens it missed, a step record() never sees); the try's own
  // steps replace that mode's stale measurement.
  bool speculate(int32_t n_decoding) {
    if (n_decoding < 1 || n_decoding > max_batch_) return false;
    if (!measured_) return true;
    Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    ++b.steps;
    // Until both modes are measured, alternate (speculation first).
    if (b.spec.n < kWarmup || b.plain.n < kWarmup) return b.spec.n <= b.plain.n;
    const bool spec_cheaper = b.spec.seconds_per_token <= b.plain.seconds_per_token;
    if (b.explore_left == 0 && b.steps >= b.next_explore) {
      b.explore_left = kExploreSteps;
      b.exploring_spec = !spec_cheaper;
    }
    if (b.explore_left == 0) return spec_cheaper;
    if (--b.explore_left == 0) end_exploration(b);  // out of steps: decide on what was recorded
    return b.exploring_spec;
  }

  // A pure decode step (no prompt tokens) with n_decoding sequences took `seconds` for n_tokens generated
  // tokens; `speculated`: it verified drafts.
  void record(int32_t n_decoding, bool speculated, double seconds, int32_t n_tokens) {
    if (n_decoding < 1 || n_decoding > max_batch_ || n_tokens <= 0) return;
    Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    Mode& m = speculated ? b.spec : b.plain;
    const double x = seconds / n_tokens;
    const bool in_try = b.explore_left > 0 && speculated == b.exploring_spec;
    if (in_try) {  // the mode's mean is from before the wait: the try's steps replace it
      m.seconds_per_token = b.try_samples == 0 ? x : (m.seconds_per_token * b.try_samples + x) / (b.try_samples + 1);
      ++b.try_samples;
    } else {
      m.seconds_per_token = m.n == 0 ? x : m.seconds_per_token + kAlpha * (x - m.seconds_per_token);
    }
    ++m.n;
    if (in_try && b.try_samples == kTrySamples) {
      b.explore_left = 0;
      end_exploration(b);
    }
  }

  // Measured seconds per token at n_decoding sequences (0 when unmeasured), for /metrics and tests.
  double seconds_per_token(int32_t n_decoding, bool speculated) const {
    if (n_decoding < 1 || n_decoding > max_batch_) return 0;
    const Bucket& b = stats_[static_cast<size_t>(n_decoding)];
    return (speculated ? b.spec : b.plain).seconds_per_token;
  }

  static constexpr int32_t kMaxExploreInterval = 1024;  // steps

 private:
  static constexpr int32_t kWarmup = 3;        // steps measured in each mode before choosing
  static constexpr double kAlpha = 0.1;        // weight of the newest step in the running mean
  static constexpr int32_t kExploreSteps = 4;  // most steps a try of the other mode lasts
  static constexpr int32_t kTrySamples = 2;    // recorded steps that end a try
  struct Mode {
    int64_t n = 0;
    double seconds_per_token = 0;
  };
  struct Bucket {
    int64_t steps = 0;
    Mode spec = {}, plain = {};
    int64_t next_explore = 0;  // the step count at which the other mode is tried next
    int32_t interval = 0;      // steps between tries (starts at explore_every)
    int32_t explore_left = 0;  // steps left in the try under way (0: none)
    int32_t try_samples = 0;   // its steps recorded so far
    bool exploring_spec = false;
  };
  // A try ended: where it overturned the choice (the tried mode measured cheaper) the next comes soon,
  // otherwise after twice the wait.
  void end_exploration(Bucket& b) {
    const bool overturned = b.try_samples > 0 && (b.spec.seconds_per_token <= b.plain.seconds_per_token) == b.exploring_spec;
    b.interval = overturned ? explore_every_ : std::min(2 * b.interval, kMaxExploreInterval);
    b.next_explore = b.steps + b.interval;
    b.try_samples = 0;
  }
  int32_t max_batch_;
  bool measured_;
  int32_t explore_every_;
  std::vector<Bucket> stats_;  // [n_decoding]
};

}  // namespace kestrel
