// Serving split over processes (issue 16: tensor, pipeline, expert parallel): rank 0 holds the HTTP server,
// the tokenizer and the scheduler; the other ranks (followers) hold only their share of the weights and of
// the KV cache. Every step, rank 0 sends the step's self-contained plan (engine/step_plan.h: tokens,
// positions, page tables, page copies) to the followers and all ranks run it together, the forward pass's
// own messages joining them; each rank's KV pages have the same ids, so one scheduler places every rank's
// KV. Followers trust the plan's ids (rank 0 runs the same binary and checked the request).
//
// Contract: rank 0 makes a StepPlanRelay (through the Engine, when its model is split over more than one
// process) and each other rank calls follow_step_plans with a ModelRunner over the same number of pages. Every
// plan rank 0 runs goes through send() first. Destroying the relay tells the followers to stop.
// A plan's imported pages (prefill/decode disaggregation: each rank's share of prompts computed elsewhere)
// travel with it: send() takes every rank's bytes and sends each follower its own after the plan.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "dist/communicator.h"
#include "engine/model_runner.h"
#include "engine/step_plan.h"

namespace kestrel {

class StepPlanRelay {
 public:
  explicit StepPlanRelay(Communicator& world) : world_(world) {}
  ~StepPlanRelay();  // sends stop
  StepPlanRelay(const StepPlanRelay&) = delete;
  StepPlanRelay& operator=(const StepPlanRelay&) = delete;

  // imported: [world size][plan.imported_pages.size() * page_bytes] each rank's bytes of the plan's imported
  // pages (entry 0, this rank's, unused: rank 0 fills its own); null when the plan imports none.
  void send(const StepPlan& plan, const std::vector<std::vector<uint8_t>>* imported = nullptr);

 private:
  Communicator& world_;
};

// A follower: runs every plan rank 0 sends until it sends stop (its imported pages first, into
// runner.kv()), calling after_run (if set) after each. Returns the plans run. A plan that does not decode
// ends every rank (Communicator::abort).
int64_t follow_step_plans(Communicator& world, ModelRunner& runner,
                          const std::function<void(const StepPlan&)>& after_run = {});

// Data-parallel replicas over ranks (dist/data_parallel_ranks.h): the front end's side of a replica whose
// ranks are elsewhere. run() sends the plan over link (this process rank 0, the replica's leader rank 1) and
// returns the logits the leader sends back. Destroying it tells the leader to stop.
class ReplicaLink {
 public:
  ReplicaLink(Communicator& link, int32_t n_vocab) : link_(link), plans_(link), n_vocab_(n_vocab) {}

  // logits [plan.n_logits(), n_vocab], as ModelRunner::run on the replica's ranks computed them.
  std::vector<float> run(const StepPlan& plan);
  const CommStats& stats() const { return link_.stats(); }

 private:
  Communicator& link_;
  StepPlanRelay plans_;
  int32_t n_vocab_;
};

// A replica's leader: runs every plan the front end sends over link, relaying it first to the replica's
// other ranks (relay; null when the replica is this rank alone), and sends back its logits, until the
// front end says stop. Returns the plans run.
int64_t lead_replica(Communicator& link, ModelRunner& runner, StepPlanRelay* relay, int32_t n_vocab);

// The follower side of one message: the next plan, or nullopt when rank 0 said stop.
std::optional<StepPlan> receive_step_plan(Communicator& world);

}  // namespace kestrel
