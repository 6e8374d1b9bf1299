// The decode side of prefill/decode disaggregation (issue 16): rank 0 sends each new prompt to a prefill
// rank (engine/prefill_worker.h) instead of computing it, receives its KV pages while they are computed
// (between its own decode steps, so the transfer overlaps both sides' compute) and, with the last prompt
// token's logits, hands the prompt to the engine, which copies the pages into its own KV and decodes.
// A prompt goes to the prefill rank that last took a prompt with the same beginning (its prefix cache has
// it) unless that rank has much more queued than the least loaded one, which gets it otherwise.
//
// Roles may split their model by --tp (engine/prefill_worker.h): the decode group is ranks [0, G), the
// prefill groups ranks [G, 2G), [2G, 3G), ..., each led by its first rank, which takes the prompts. Every rank
// of a prefill group sends its share of each page (the KV heads of its tensor rank); a prompt is complete
// once its last logits and every share of its pages are here.
//
// Contract: one thread at a time makes the calls (the prefill ranks run serve_prefills with the same page
// size and KV types); while the client lives, its message channel makes every call on the world
// (dist/message_channel.h). Destroying the client stops the prefill ranks. A malformed or unexpected message from a
// prefill rank (a bug, not an input) ends the job.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/timer.h"
#include "dist/communicator.h"
#include "dist/data_parallel_ranks.h"
#include "dist/message_channel.h"
#include "engine/prefill_messages.h"

namespace kestrel {

struct PrefilledPrompt {
  int64_t seq_id = 0;
  // [G][ceil(n_prompt / block_size)][page_bytes] each tensor rank's share of its KV pages, in page-table order
  std::vector<std::vector<uint8_t>> pages;
  std::vector<float> logits;   // [n_vocab] the last prompt token's
  int32_t n_cached = 0;        // prompt tokens the prefill rank's prefix cache supplied
};

// Prefill/decode disaggregation as /metrics shows it. Role times: the prefill role's time to first token
// runs from rank 0 sending a prompt to its logits and KV being on rank 0; the decode role's time per output
// token is a decode step's wall time on rank 0 (Engine).
struct DisaggregationStats {
  int32_t prefill_ranks = 0;                // 0: not disaggregated
  int32_t group_size = 1;                   // G: ranks per role group (--tp)
  std::vector<PrefillWorkerStats> workers;  // [prefill_ranks / G] each prefill group's latest (its leader's)
  int64_t prompts = 0;                      // prefilled and received
  int64_t kv_pages = 0, kv_bytes = 0;       // KV received
  double prefill_ttft_seconds = 0;          // summed over prompts
  double prefill_queue_seconds = 0, prefill_compute_seconds = 0;  // of which waiting and computing on the prefill rank
};

class PrefillClient {
 public:
  // world: ranks [0, group_size) decode (rank 0, this one, leads them), the others prefill in groups of
  // group_size. page_bytes: KvStorage::page_bytes() (of each rank's share).
  PrefillClient(Communicator& world, int32_t group_size, size_t page_bytes, int32_t block_size, int32_t n_vocab);
  ~PrefillClient();  // stops the prefill ranks, taking what they still send
  PrefillClient(const PrefillClient&) = delete;
  PrefillClient& operator=(const PrefillClient&) = delete;

  void submit(int64_t seq_id, std::span<const int32_t> prompt, const std::string& cache_salt);
  // The prompt's prefill rank drops it and frees its pages; nothing more of it is returned.
  void cancel(int64_t seq_id);
  // Takes every message that arrived; returns the prompts now complete, in the order they completed.
  std::vector<PrefilledPrompt> poll();
  size_t n_outstanding() const { return outstanding_.size(); }
  const DisaggregationStats& stats() const { return stats_; }

 private:
  struct Outstanding {
    int rank = 0;  // its prefill group's leader
    int32_t n_tokens = 0;
    double sent_s = 0;
    bool logits_here = false;  // Done came; shares of its pages may still be on their way
    PrefilledPrompt result;
  };
  // The leader (world rank) of a prefill rank's group (dist/data_parallel_ranks.h's layout, group 0 decoding).
  int leader_of(int rank) const { return replica_leader(replica_of_rank(rank, group_size_), group_size_); }
  // Prefill workers (replicas 1 .. n_workers(); replica 0 decodes).
  int n_workers() const { return world_.size() / group_size_ - 1; }
  int pick_rank(std::span<const int32_t> prompt, const std::string& cache_salt);
  // Handles one message from a prefill rank; completed prompts go to done.
  void handle(int source, PrefillMessage m, std::vector<PrefilledPrompt>& done);
  void send(const PrefillMessage& m, int rank) { channel_.post(encode_prefill_message(m), rank); }

  Communicator& world_;
  MessageChannel channel_;  // makes every call on world_ while the client lives
  int32_t group_size_;
  size_t page_bytes_;
  int32_t block_size_, n_vocab_;
  Timer clock_;
  std::map<int64_t, Outstanding> outstanding_;  // by sequence id
  std::vector<int64_t> queued_tokens_;          // [world size] prompt tokens outstanding per prefill leader
  std::map<uint64_t, int> affinity_;            // hash of a prompt's beginning -> the rank that last took it
  DisaggregationStats stats_;
};

}  // namespace kestrel
