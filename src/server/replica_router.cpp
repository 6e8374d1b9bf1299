#include "server/replica_router.h"

#include <algorithm>
#include <limits>

namespace kestrel {
namespace {
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}
}  // namespace

ReplicaRouter::ReplicaRouter(std::vector<RequestQueue*> replicas, RouterConfig config)
    : replicas_(std::move(replicas)), config_(config), remembered_(replicas_.size()), remembered_tokens_(replicas_.size(), 0) {
  stats_.routed.assign(replicas_.size(), 0);
}

size_t ReplicaRouter::choose_locked(const std::vector<int32_t>& prompt, bool& by_prefix) const {
  by_prefix = false;
  const size_t n = replicas_.size();
  if (config_.policy == RoutePolicy::RoundRobin) return next_ % n;
  std::vector<size_t> load(n);  // [replicas] pending requests
  for (size_t r = 0; r < n; ++r) load[r] = replicas_[r]->n_pending();
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  // Least loaded; among equals the one remembering fewest tokens (new prefixes spread out).
  size_t least = 0;
  for (size_t r = 1; r < n; ++r)
    if (load[r] < load[least] || (load[r] == load[least] && remembered_tokens_[r] < remembered_tokens_[least])) least = r;
  if (*hi - *lo > config_.balance_slack) return least;
  size_t best = least, best_match = 0;
  for (size_t r = 0; r < n; ++r)
    for (const std::vector<int32_t>& past : remembered_[r]) {
      const size_t m = common_prefix(prompt, past);
      if (m > best_match || (m == best_match && m > 0 && load[r] < load[best])) best = r, best_match = m;
    }
  if (best_match == 0 || static_cast<double>(best_match) < config_.min_match * static_cast<double>(prompt.size())) return least;
  by_prefix = true;
  return best;
}

size_t ReplicaRouter::choose(const std::vector<int32_t>& prompt) const {
  std::lock_guard<std::mutex> lock(mutex_);
  bool by_prefix = false;
  return choose_locked(prompt, by_prefix);
}

void ReplicaRouter::remember_locked(size_t replica, const std::vector<int32_t>& prompt) {
  auto& past = remembered_[replica];
  past.push_back(prompt);
  remembered_tokens_[replica] += prompt.size();
  while (past.size() > config_.remembered_prompts) {
    remembered_tokens_[replica] -= past.front().size();
    past.pop_front();
  }
}

bool ReplicaRouter::submit(Request request, std::shared_ptr<RequestChannel> channel) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = replica_of_.begin(); it != replica_of_.end();) it = it->second.first.expired() ? replica_of_.erase(it) : std::next(it);
  bool by_prefix = false;
  const size_t r = choose_locked(request.prompt, by_prefix);
  const std::vector<int32_t> prompt = request.prompt;
  if (!replicas_[r]->submit(std::move(request), channel)) return false;
  ++next_;
  ++stats_.routed[r];
  if (config_.policy == RoutePolicy::CacheAware) ++(by_prefix ? stats_.by_prefix : stats_.by_load);
  remember_locked(r, prompt);
  replica_of_[channel.get()] = {channel, r};
  return true;
}

void ReplicaRouter::cancel(const std::shared_ptr<RequestChannel>& channel) {
  size_t r = replicas_.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = replica_of_.find(channel.get());
    if (it != replica_of_.end() && it->second.first.lock() == channel) r = it->second.second;
  }
  if (r < replicas_.size()) replicas_[r]->cancel(channel);
  else channel->cancel();
}

size_t ReplicaRouter::n_pending() const {
  size_t n = 0;
  for (const RequestQueue* q : replicas_) n += q->n_pending();
  return n;
}

size_t ReplicaRouter::max_pending() const {
  size_t n = 0;
  for (const RequestQueue* q : replicas_) n += q->max_pending();
  return n;
}

RouterStats ReplicaRouter::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace kestrel
