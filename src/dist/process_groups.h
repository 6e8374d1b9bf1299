// A job's processes as a grid (issue 16): pp pipeline stages, each of ep expert-parallel groups of tp
// tensor-parallel ranks. World rank = (stage * ep + expert rank) * tp + tensor rank. A rank works with four
// communicators: the world (every rank: serving's step plans), its tensor group (the tp ranks sharing its
// stage and experts: all-reduces and the logits gather), its expert group (the ep ranks of its stage with
// its tensor rank: the experts' outputs summed) and its pipeline group (the pp ranks, one per stage, with
// its tensor and expert rank: activations from stage to stage).
#pragma once
#include <memory>

#include "core/status.h"
#include "dist/communicator.h"

namespace kestrel {

struct ProcessGroups {
  std::unique_ptr<Communicator> world;     // every rank
  std::unique_ptr<Communicator> tensor;    // [tp] this stage's ranks, by tensor rank
  std::unique_ptr<Communicator> pipeline;  // [pp] one rank per stage, by stage
  std::unique_ptr<Communicator> expert;    // [ep] this stage's expert shares, by expert rank
  std::unique_ptr<Communicator> context;   // [cp] context parallel: every rank (it runs alone yet), by rank

  int tp() const { return tensor->size(); }
  int ep() const { return expert->size(); }
  int cp() const { return context->size(); }
  int pp() const { return pipeline->size(); }
  int stage() const { return pipeline->rank(); }
  bool split() const { return world->size() > 1; }
  // What this rank has sent and waited for over all of them.
  CommStats stats() const;
  void reset_stats();
  // "tp 2", "pp 2", "tp 2 x pp 2", "ep 2", ... ("" for one process).
  std::string describe() const;

  ~ProcessGroups();  // the groups before the world
  ProcessGroups() = default;
  ProcessGroups(ProcessGroups&&) = default;
  ProcessGroups& operator=(ProcessGroups&&) = default;
};

// Whether `size` processes make a tp x ep x pp x cp grid (context parallelism, cp > 1, does not combine
// with the others yet); the error names the numbers.
Status check_process_grid(int size, int tp, int pp, int ep, int cp);
// Splits world into the grid (check_process_grid first: on an error the world is gone with it).
Result<ProcessGroups> make_process_groups(std::unique_ptr<Communicator> world, int tp, int pp, int ep = 1, int cp = 1);

}  // namespace kestrel
