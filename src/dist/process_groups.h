// A job's processes as a grid (issue 16): pp pipeline stages, each of tp tensor-parallel ranks. World rank
// = stage * tp + tensor rank. A rank works with three communicators: the world (every rank: serving's step
// plans), its tensor group (the tp ranks of its stage: all-reduces and the logits gather) and its pipeline
// group (the pp ranks, one per stage, that hold the same tensor share: activations from stage to stage).
#pragma once
#include <memory>

#include "core/status.h"
#include "dist/communicator.h"

namespace kestrel {

struct ProcessGroups {
  std::unique_ptr<Communicator> world;     // every rank
  std::unique_ptr<Communicator> tensor;    // [tp] this stage's ranks, by tensor rank
  std::unique_ptr<Communicator> pipeline;  // [pp] one rank per stage, by stage

  int tp() const { return tensor->size(); }
  int pp() const { return pipeline->size(); }
  int stage() const { return pipeline->rank(); }
  bool split() const { return world->size() > 1; }
  // What this rank has sent and waited for over all three.
  CommStats stats() const;
  void reset_stats();
  // "tp 2", "pp 2", "tp 2 x pp 2", or "" for one process.
  std::string describe() const;

  ~ProcessGroups();  // the groups before the world
  ProcessGroups() = default;
  ProcessGroups(ProcessGroups&&) = default;
  ProcessGroups& operator=(ProcessGroups&&) = default;
};

// Splits world (whose size must be tp x pp) into the grid; an error names the numbers otherwise.
Result<ProcessGroups> make_process_groups(std::unique_ptr<Communicator> world, int tp, int pp);

}  // namespace kestrel
