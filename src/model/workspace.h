// Scratch memory of forward passes, kept from one call to the next: each activation buffer is sized for
// the largest batch seen so far and reused, so a forward neither allocates nor zero-fills buffers per layer,
// and a large batch does not map and fault in fresh pages on every call. One per caller of Model::forward;
// not shared between threads.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace kestrel {

class ActivationObserver;

class ForwardWorkspace {
 public:
  ActivationObserver* observer = nullptr;  // calibration: sees every matrix product's input (optional)
  // Mixtures of experts: [n_expert] the (token, expert) pairs routed to each expert so far, over every
  // MoE layer and forward that used this workspace (expert load).
  std::vector<int64_t> expert_tokens;

  enum class Buffer { Residual, Normed, Q, K, V, AttnOut, Gate, Up, Last, Partial, Logits, Wide, Count };

  // At least n floats for `buffer`; the contents are whatever its previous user left there.
  float* get(Buffer buffer, size_t n) {
    std::vector<float>& b = buffers_[static_cast<size_t>(buffer)];
    if (b.size() < n) b.resize(n);
    return b.data();
  }

 private:
  std::array<std::vector<float>, static_cast<size_t>(Buffer::Count)> buffers_;
};

}  // namespace kestrel
