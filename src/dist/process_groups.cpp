#include "dist/process_groups.h"

#include <string>

namespace kestrel {

CommStats ProcessGroups::stats() const {
  CommStats total;
  for (const Communicator* c : {world.get(), tensor.get(), pipeline.get()}) {
    if (!c) continue;
    total.messages += c->stats().messages;
    total.bytes += c->stats().bytes;
    total.seconds += c->stats().seconds;
  }
  return total;
}

void ProcessGroups::reset_stats() {
  for (Communicator* c : {world.get(), tensor.get(), pipeline.get()})
    if (c) c->reset_stats();
}

std::string ProcessGroups::describe() const {
  const std::string t = "tp " + std::to_string(tp()), p = "pp " + std::to_string(pp());
  if (tp() > 1 && pp() > 1) return t + " x " + p;
  if (tp() > 1) return t;
  if (pp() > 1) return p;
  return "";
}

ProcessGroups::~ProcessGroups() {
  pipeline.reset();
  tensor.reset();
  world.reset();
}

Result<ProcessGroups> make_process_groups(std::unique_ptr<Communicator> world, int tp, int pp) {
  if (tp < 1 || pp < 1) return Error{"--tp and --pp must be at least 1"};
  if (world->size() != tp * pp)
    return Error{"launched as " + std::to_string(world->size()) + " processes, but --tp " + std::to_string(tp) + " x --pp " +
                 std::to_string(pp) + " needs " + std::to_string(tp * pp)};
  ProcessGroups g;
  const int rank = world->rank(), stage = rank / tp, tensor_rank = rank % tp;
  g.tensor = world->split(stage, tensor_rank);
  g.pipeline = world->split(tensor_rank, stage);
  g.world = std::move(world);
  return g;
}

}  // namespace kestrel
