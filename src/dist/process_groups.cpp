#include "dist/process_groups.h"

#include <string>

namespace kestrel {

CommStats ProcessGroups::stats() const {
  CommStats total;
  for (const Communicator* c : {world.get(), tensor.get(), pipeline.get(), expert.get()}) {
    if (!c) continue;
    total.messages += c->stats().messages;
    total.bytes += c->stats().bytes;
    total.seconds += c->stats().seconds;
  }
  return total;
}

void ProcessGroups::reset_stats() {
  for (Communicator* c : {world.get(), tensor.get(), pipeline.get(), expert.get()})
    if (c) c->reset_stats();
}

std::string ProcessGroups::describe() const {
  std::string out;
  for (const auto& [name, n] : {std::pair{"tp ", tp()}, std::pair{"ep ", ep()}, std::pair{"pp ", pp()}})
    if (n > 1) out += (out.empty() ? "" : " x ") + std::string(name) + std::to_string(n);
  return out;
}

ProcessGroups::~ProcessGroups() {
  expert.reset();
  pipeline.reset();
  tensor.reset();
  world.reset();
}

Result<ProcessGroups> make_process_groups(std::unique_ptr<Communicator> world, int tp, int pp, int ep) {
  if (tp < 1 || pp < 1 || ep < 1) return Error{"--tp, --ep and --pp must be at least 1"};
  if (world->size() != tp * ep * pp)
    return Error{"launched as " + std::to_string(world->size()) + " processes, but --tp " + std::to_string(tp) + " x --ep " +
                 std::to_string(ep) + " x --pp " + std::to_string(pp) + " needs " + std::to_string(tp * ep * pp)};
  ProcessGroups g;
  const int rank = world->rank(), tensor_rank = rank % tp, expert_rank = rank / tp % ep, stage = rank / (tp * ep);
  g.tensor = world->split(stage * ep + expert_rank, tensor_rank);
  g.expert = world->split(stage * tp + tensor_rank, expert_rank);
  g.pipeline = world->split(expert_rank * tp + tensor_rank, stage);
  g.world = std::move(world);
  return g;
}

}  // namespace kestrel
