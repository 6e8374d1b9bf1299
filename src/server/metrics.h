// Server metrics in Prometheus text format: request and token counters, TTFT / TPOT / latency histograms,
// and engine gauges (KV blocks used, cached and free, queue lengths, preemptions, prefix-cache hits), summed
// over data-parallel replicas and also given per replica, with the router's decisions.
// Thread-safe: HTTP threads record request timings, the engine thread records step statistics.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/replica_router.h"

namespace kestrel {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double x);
  // Prometheus lines for metric `name` (cumulative buckets, _sum, _count).
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;    // upper bounds, ascending
  std::vector<uint64_t> counts_;  // [bounds + 1] per bucket (last: +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void request_finished(const std::string& endpoint, int status);
  void request_timing(double ttft_s, double tpot_s, double latency_s, int32_t n_generated);
  // replica: which data-parallel replica's engine (0 with one).
  void engine_stats(const EngineStats& stats, size_t replica = 0);
  // Data parallel: the router whose decisions /metrics shows (must outlive this; null: none).
  void set_router(const ReplicaRouter* router);
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  Histogram ttft_, tpot_, latency_;
  std::vector<EngineStats> replicas_;  // [replicas] each engine's latest
  const ReplicaRouter* router_ = nullptr;
};

}  // namespace kestrel
