// Speculation bookkeeping: what was drafted and kept (overall and by draft position), and the draft
// length each sequence adapts to its own acceptance.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace kestrel {

struct SpecStats {
  int64_t verify_steps = 0;             // target forwards that verified drafts
  int64_t drafted = 0, accepted = 0;
  std::vector<int64_t> drafted_at;      // [draft position] drafts made at that position
  std::vector<int64_t> accepted_at;     // [draft position] of them kept

  void record(int32_t n_drafted, int32_t n_accepted) {
    ++verify_steps;
    drafted += n_drafted;
    accepted += n_accepted;
    if (drafted_at.size() < static_cast<size_t>(n_drafted)) {
      drafted_at.resize(static_cast<size_t>(n_drafted), 0);
      accepted_at.resize(static_cast<size_t>(n_drafted), 0);
    }
    for (int32_t i = 0; i < n_drafted; ++i) {
      ++drafted_at[static_cast<size_t>(i)];
      if (i < n_accepted) ++accepted_at[static_cast<size_t>(i)];
    }
  }
  double acceptance_rate() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
  // Tokens a verifying forward yields: the kept drafts plus the target's own token.
  double mean_accepted_length() const {
    return verify_steps > 0 ? static_cast<double>(accepted) / static_cast<double>(verify_steps) + 1.0 : 0.0;
  }
};

// Per sequence: after a step whose drafts were all kept the next drafts two more (up to max); otherwise
// one more than were kept (at least min, at least 1), so a sequence whose drafts keep failing drafts little.
class AdaptiveDraftLength {
 public:
  AdaptiveDraftLength(int32_t min, int32_t max) : min_(std::max(1, min)), max_(std::max(1, max)), k_(std::max(1, max / 2)) {
    k_ = std::clamp(k_, min_, max_);
  }
  int32_t next() const { return k_; }
  void update(int32_t n_drafted, int32_t n_accepted) {
    if (n_drafted <= 0) return;
    k_ = std::clamp(n_accepted == n_drafted ? k_ + 2 : n_accepted + 1, min_, max_);
  }

 private:
  int32_t min_, max_, k_;
};

}  // namespace kestrel
