// Data-parallel serving (issue 16): several engine replicas, each with its own KV cache and prefix cache,
// behind one HTTP front end. The router picks a replica per request:
//  - cache-aware (the default, as SGLang's router does): the replica whose past prompts share the longest
//    prefix with this one, so a shared system prompt stays cached on one replica instead of being computed
//    on every replica; unless the replicas' loads drift apart by more than `balance_slack` requests (then
//    the least loaded), or the best match covers less than `min_match` of the prompt (then the least
//    loaded, ties to the one that remembers fewest tokens, so new prefixes spread out);
//  - round-robin, for comparison.
// The router's memory of each replica's prompts is its own approximation of that replica's cache (it sees
// no evictions): the last `remembered_prompts` prompts sent there.
//
// Contract: thread-safe (RequestQueue). The replicas must outlive the router.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "server/request_queue.h"

namespace kestrel {

enum class RoutePolicy { CacheAware, RoundRobin };

struct RouterConfig {
  RoutePolicy policy = RoutePolicy::CacheAware;
  double min_match = 0.5;       // share of the prompt a match must cover to count
  size_t balance_slack = 8;     // pending requests by which replicas may differ before load wins
  size_t remembered_prompts = 256;
};

struct RouterStats {
  std::vector<uint64_t> routed;         // [replicas] requests sent to each
  uint64_t by_prefix = 0, by_load = 0;  // cache-aware decisions: a prefix match won, or load did
};

class ReplicaRouter final : public RequestQueue {
 public:
  ReplicaRouter(std::vector<RequestQueue*> replicas, RouterConfig config);

  bool submit(Request request, std::shared_ptr<RequestChannel> channel) override;
  void cancel(const std::shared_ptr<RequestChannel>& channel) override;
  size_t n_pending() const override;
  size_t max_pending() const override;

  // The replica a prompt would go to now (no request is sent; nothing is remembered).
  size_t choose(const std::vector<int32_t>& prompt) const;
  RouterStats stats() const;

 private:
  size_t choose_locked(const std::vector<int32_t>& prompt, bool& by_prefix) const;
  void remember_locked(size_t replica, const std::vector<int32_t>& prompt);

  std::vector<RequestQueue*> replicas_;
  RouterConfig config_;
  mutable std::mutex mutex_;
  std::vector<std::deque<std::vector<int32_t>>> remembered_;  // [replicas] their latest prompts, newest last
  std::vector<size_t> remembered_tokens_;                       // [replicas]
  size_t next_ = 0;                                             // round-robin
  RouterStats stats_;
  // channel -> the replica serving it (weak: a finished request's entry lapses and is swept on submit)
  std::map<const RequestChannel*, std::pair<std::weak_ptr<RequestChannel>, size_t>> replica_of_;
};

}  // namespace kestrel
