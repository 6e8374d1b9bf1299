// One step's work, as self-contained data: which tokens of which sequences run in the next forward pass,
// at which positions, over which KV pages, which pages are copied first, and whose logits come back. A
// runner needs nothing else (no scheduler, no sequence state), so a plan could be sent to another process.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_manager.h"

namespace kestrel {

struct ScheduledChunk {
  int64_t seq_id = 0;
  int32_t start = 0;            // position of tokens[0] (the sequence's n_computed)
  std::vector<int32_t> tokens;  // [n_tokens] token ids at positions start, start + 1, ...
  std::vector<int32_t> pages;   // the sequence's page table, covering positions [0, start + n_tokens)
  int32_t n_logits = 0;         // logits of the last n_logits tokens come back (1: the chunk samples a token)

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool samples() const { return n_logits > 0; }
  bool operator==(const ScheduledChunk&) const = default;
};

// Prefill/decode disaggregation: pages of a sequence a prefill rank sends to the decode side once the step's
// forward pass computed them.
struct PageExport {
  int64_t seq_id = 0;
  int32_t first_page = 0;      // index in the sequence's page table of pages[0]
  std::vector<int32_t> pages;  // [n] page ids, in page-table order
  bool operator==(const PageExport&) const = default;
};

struct StepPlan {
  // Prefill/decode disaggregation over split roles: pages whose bytes come with the plan, filled before
  // anything else (a decode rank's share of prompts a prefill group computed; StepPlanRelay sends them).
  std::vector<int32_t> imported_pages;
  std::vector<BlockCopy> copies;  // run before the forward, in order (after the imports)
  std::vector<ScheduledChunk> chunks;
  std::vector<int64_t> preempted;  // sequences sent back to the queue this step
  std::vector<PageExport> exports;  // a prefill group's plan: pages each rank sends to the decode side after the forward
  int32_t n_tokens() const;
  int32_t n_logits() const;  // rows of logits the forward returns, chunk by chunk
  bool empty() const { return chunks.empty(); }
  bool operator==(const StepPlan&) const = default;
};

// The plan as bytes, to send to another process of the same machine type (native byte order), and back.
// decode_step_plan checks every count against the bytes left and fails with a message on anything
// malformed (truncated, trailing bytes, negative counts or ids).
std::vector<uint8_t> encode_step_plan(const StepPlan& plan);
Result<StepPlan> decode_step_plan(std::span<const uint8_t> bytes);

}  // namespace kestrel
