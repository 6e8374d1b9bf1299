// How speculative decoding is configured, in `kestrel generate`, `kestrel bench` and `kestrel serve`
// (flags as llama.cpp's where they exist).
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kestrel {

struct SpeculativeConfig {
  int32_t draft_max = 16;  // most tokens drafted per step (--draft-max)
  int32_t draft_min = 0;   // fewer drafted than this: a plain step instead (--draft-min)
  int32_t ngram = 0;       // n-gram drafting (no draft model): longest n-gram looked up (--spec-ngram)
  bool adaptive = true;    // the draft length follows each sequence's acceptance (else always draft_max)
  // Serving: speculation runs only while at most this many sequences decode at once (--spec-max-batch).
  int32_t max_batch = 16;
  // Serving: speculate only where it measured cheaper per token than plain steps (spec/spec_controller.h);
  // false: always, up to max_batch (--spec-always).
  bool measured = true;

  Status validate() const {
    if (draft_max < 1) return Error{"--draft-max must be >= 1"};
    if (draft_min < 0 || draft_min > draft_max) return Error{"--draft-min must be in [0, --draft-max]"};
    if (ngram < 0) return Error{"--spec-ngram must be >= 0"};
    if (max_batch < 1) return Error{"--spec-max-batch must be >= 1"};
    return {};
  }
};

}  // namespace kestrel
