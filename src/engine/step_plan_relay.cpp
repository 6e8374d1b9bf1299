#include "engine/step_plan_relay.h"

#include <vector>

namespace kestrel {
namespace {
// Each message is a header, broadcast patiently (followers may wait long between steps), then the plan's
// bytes. A header of kStop ends the followers.
constexpr int64_t kStop = -1;
}  // namespace

StepPlanRelay::~StepPlanRelay() {
  int64_t header = kStop;
  world_.broadcast_patiently(&header, sizeof header, 0);
}

void StepPlanRelay::send(const StepPlan& plan, const std::vector<std::vector<uint8_t>>* imported) {
  std::vector<uint8_t> bytes = encode_step_plan(plan);
  int64_t header = static_cast<int64_t>(bytes.size());
  world_.broadcast_patiently(&header, sizeof header, 0);
  world_.broadcast(bytes.data(), bytes.size(), 0);
  if (plan.imported_pages.empty()) return;
  if (!imported || imported->size() != static_cast<size_t>(world_.size()))
    world_.abort("a step plan imports pages but their bytes are missing", 1);
  for (int r = 1; r < world_.size(); ++r) {
    const std::vector<uint8_t>& share = (*imported)[static_cast<size_t>(r)];
    world_.send(share.data(), share.size(), r);
  }
}

std::optional<StepPlan> receive_step_plan(Communicator& world) {
  int64_t header = 0;
  world.broadcast_patiently(&header, sizeof header, 0);
  if (header == kStop) return std::nullopt;
  if (header < 0) world.abort("a step plan header of " + std::to_string(header) + " bytes", 1);
  std::vector<uint8_t> bytes(static_cast<size_t>(header));  // [header] the encoded plan
  world.broadcast(bytes.data(), bytes.size(), 0);
  auto plan = decode_step_plan(bytes);
  if (!plan.ok()) world.abort(plan.error(), 1);
  return std::move(plan).value();
}

int64_t follow_step_plans(Communicator& world, ModelRunner& runner, const std::function<void(const StepPlan&)>& after_run) {
  int64_t n_plans = 0;
  std::vector<uint8_t> imported;  // [plan.imported_pages.size()][page_bytes] this rank's share
  while (auto plan = receive_step_plan(world)) {
    if (!plan->imported_pages.empty()) {
      KvStorage& kv = runner.kv();
      const size_t page_bytes = kv.page_bytes();
      imported.resize(plan->imported_pages.size() * page_bytes);
      world.recv(imported.data(), imported.size(), 0);
      for (size_t i = 0; i < plan->imported_pages.size(); ++i) {
        const int32_t page = plan->imported_pages[i];
        if (page >= kv.spec().n_blocks) world.abort("a step plan imports page " + std::to_string(page) + " of " +
                                                    std::to_string(kv.spec().n_blocks), 1);
        kv.import_page(page, imported.data() + i * page_bytes);
      }
    }
    if (plan->empty()) continue;  // it only imported pages
    runner.run(*plan);
    if (after_run) after_run(*plan);
    ++n_plans;
  }
  return n_plans;
}

std::vector<float> ReplicaLink::run(const StepPlan& plan) {
  plans_.send(plan);
  std::vector<float> logits(static_cast<size_t>(plan.n_logits()) * static_cast<size_t>(n_vocab_));  // [n_logits, n_vocab]
  if (logits.empty()) return logits;  // a step of prompt chunks that sample nothing: no message comes back
  link_.recv_patiently(logits.data(), logits.size() * sizeof(float), 1);  // rank 0 runs other replicas meanwhile
  return logits;
}

int64_t lead_replica(Communicator& link, ModelRunner& runner, StepPlanRelay* relay, int32_t n_vocab) {
  int64_t n_plans = 0;
  std::vector<float> logits;  // [plan.n_logits(), n_vocab]
  while (auto plan = receive_step_plan(link)) {
    if (relay) relay->send(*plan);
    logits.resize(static_cast<size_t>(plan->n_logits()) * static_cast<size_t>(n_vocab));
    runner.run(*plan, logits.data());
    if (!logits.empty()) link.send(logits.data(), logits.size() * sizeof(float), 0);
    ++n_plans;
  }
  return n_plans;
}

}  // namespace kestrel
