#include "dist/process_groups.h"

#include <string>

namespace kestrel {

CommStats ProcessGroups::stats() const {
  CommStats total;
  for (const Communicator* c : {world.get(), tensor.get(), pipeline.get(), expert.get(), context.get()}) {
    if (!c) continue;
    total.messages += c->stats().messages;
    total.bytes += c->stats().bytes;
    total.seconds += c->stats().seconds;
  }
  return total;
}

void ProcessGroups::reset_stats() {
  for (Communicator* c : {world.get(), tensor.get(), pipeline.get(), expert.get(), context.get()})
    if (c) c->reset_stats();
}

std::string ProcessGroups::describe() const {
  std::string out;
  for (const auto& [name, n] : {std::pair{"tp ", tp()}, std::pair{"ep ", ep()}, std::pair{"pp ", pp()}, std::pair{"cp ", cp()}})
    if (n > 1) out += (out.empty() ? "" : " x ") + std::string(name) + std::to_string(n);
  return out;
}

ProcessGroups::~ProcessGroups() {
  context.reset();
  expert.reset();
  pipeline.reset();
  tensor.reset();
  world.reset();
}

Status check_process_grid(int size, int tp, int pp, int ep, int cp) {
  if (tp < 1 || pp < 1 || ep < 1 || cp < 1) return Error{"--tp, --ep, --pp and --cp must be at least 1"};
  if (cp > 1 && tp * ep * pp > 1) return Error{"--cp does not combine with --tp, --ep or --pp yet"};
  if (size != tp * ep * pp * cp)
    return Error{"launched as " + std::to_string(size) + " processes, but --tp " + std::to_string(tp) + " x --ep " +
                 std::to_string(ep) + " x --pp " + std::to_string(pp) + " x --cp " + std::to_string(cp) + " needs " +
                 std::to_string(tp * ep * pp * cp)};
  return {};
}

Result<ProcessGroups> make_process_groups(std::unique_ptr<Communicator> world, int tp, int pp, int ep, int cp) {
  if (Status s = check_process_grid(world->size(), tp, pp, ep, cp); !s.ok()) return Error{s.error()};
  ProcessGroups g;
  const int rank = world->rank(), grid = cp > 1 ? 0 : rank;  // with cp every other group is the rank alone
  const int tensor_rank = grid % tp, expert_rank = grid / tp % ep, stage = grid / (tp * ep);
  g.context = world->split(cp > 1 ? 0 : rank, rank);
  if (cp > 1) {
    g.tensor = world->split(rank, 0);
    g.expert = world->split(rank, 0);
    g.pipeline = world->split(rank, 0);
    g.world = std::move(world);
    return g;
  }
  g.tensor = world->split(stage * ep + expert_rank, tensor_rank);
  g.expert = world->split(stage * tp + tensor_rank, expert_rank);
  g.pipeline = world->split(expert_rank * tp + tensor_rank, stage);
  g.world = std::move(world);
  return g;
}

}  // namespace kestrel
