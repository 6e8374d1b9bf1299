// One sequence of a request: its tokens and how far the KV cache has caught up with them. The scheduler
// owns these; the two counters replace prefill/decode phases: a step gives a sequence up to
// n_tokens() - n_computed tokens, so a first prefill, a chunked prefill, a decode and a recompute after
// preemption are all the same path. Its KV pages are the KV manager's (kv/kv_manager.h), under the same id.
#pragma once
#include <cstdint>
#include <string>
#include <vector>


namespace kestrel {

enum class SequenceStatus { Waiting, Running, Finished };

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // [n_tokens] the prompt, then the generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;       // tokens whose KV is in the cache (a prefix of tokens)
  std::string cache_salt;       // prefix-cache namespace: sequences share blocks only within one salt
  SequenceStatus status = SequenceStatus::Waiting;
  int64_t arrival = 0;          // admission order key (first come, first served)
  double arrival_ms = 0;        // when it was added (dynamic/static batching windows)
  int32_t n_skipped = 0;        // steps in which later arrivals were admitted before it (aging)
  int32_t n_cached_prompt = 0;  // prompt tokens the prefix cache supplied at its (last) admission
  int32_t n_preemptions = 0;
  // Speculative decoding: tokens proposed to follow tokens, verified in the next step together with the
  // pending last token (set_drafts); until accept_drafts, their KV is computed but not part of n_computed.
  std::vector<int32_t> drafts;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_generated() const { return n_tokens() - n_prompt; }
};

}  // namespace kestrel
