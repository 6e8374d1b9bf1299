// Messages of prefill/decode disaggregation, between the decode rank (rank 0: HTTP, scheduler, decoding;
// engine/prefill_client.h) and the prefill ranks (engine/prefill_worker.h), as bytes for
// Communicator::send_async. Rank 0 sends Job, Cancel and Stop; a prefill rank answers with the KV pages of
// a prompt as they are computed (Pages, in page-table order), then Done with the last prompt token's logits,
// Stats after whatever changed its state, and Stopped last.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

enum class PrefillMessageKind : uint8_t { Job = 1, Cancel, Stop, Pages, Done, Stats, Stopped };

// A prefill rank's state, for /metrics.
struct PrefillWorkerStats {
  int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int32_t n_waiting = 0, n_running = 0;
  int64_t prompt_tokens = 0, prompt_tokens_cached = 0, steps = 0;
  double forward_seconds = 0;
  bool operator==(const PrefillWorkerStats&) const = default;
};

struct PrefillMessage {
  PrefillMessageKind kind = PrefillMessageKind::Job;
  int64_t seq_id = 0;           // Job, Cancel, Pages, Done: rank 0's sequence id
  std::string cache_salt;       // Job: prefix-cache namespace
  std::vector<int32_t> tokens;  // Job: [n_prompt] the prompt
  int32_t first_page = 0;       // Pages: index in the sequence's page table of the first page sent
  std::vector<uint8_t> pages;   // Pages: [n_pages][page bytes] (KvStorage::export_page)
  std::vector<float> logits;    // Done: [n_vocab] the last prompt token's
  int32_t n_cached = 0;         // Done: prompt tokens the prefill rank's prefix cache supplied
  double queue_ms = 0;          // Done: from arrival on the prefill rank to admission
  double compute_ms = 0;        // Done: from admission to the logits
  PrefillWorkerStats stats;     // Stats
  bool operator==(const PrefillMessage&) const = default;
};

// A message of `kind` about sequence seq_id (0: none), its other fields empty.
inline PrefillMessage prefill_message(PrefillMessageKind kind, int64_t seq_id = 0) {
  PrefillMessage m;
  m.kind = kind;
  m.seq_id = seq_id;
  return m;
}

std::vector<uint8_t> encode_prefill_message(const PrefillMessage& message);
// Fails with a message on anything malformed (bad magic or kind, truncated, bad counts, trailing bytes, a
// negative id or page index).
Result<PrefillMessage> decode_prefill_message(std::span<const uint8_t> bytes);

}  // namespace kestrel
