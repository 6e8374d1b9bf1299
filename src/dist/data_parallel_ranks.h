// Data-parallel replicas over ranks (issue 16: `mpirun -np D*G kestrel serve --dp D --tp ...`): the job's
// ranks in D contiguous runs of G, each run one replica of the model, split over its G ranks as the
// --tp / --ep / --pp / --cp flags say (its own ProcessGroups). Job rank 0 is the front end (HTTP, router and
// every replica's scheduler and sampling) and replica 0's first rank. Each other replica's first rank, its
// leader, is linked to the front end by a communicator of those two ranks (the front end rank 0, the leader
// rank 1): the front end sends that replica's step plans over it and receives the logits back.
//
// Contract: every rank of the job calls make_data_parallel_ranks with the same numbers. A replica's
// groups and the links are destroyed before the job's communicator (the destructor does it).
#pragma once
#include <memory>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "dist/process_groups.h"

namespace kestrel {

struct DataParallelRanks {
  std::unique_ptr<Communicator> job;      // every rank of every replica
  std::unique_ptr<ProcessGroups> groups;  // this rank's replica: its world is the replica's G ranks
  // The front end: [replicas - 1] links to replicas 1.. in order; a leader: [1] its link to the front end;
  // any other rank: none.
  std::vector<std::unique_ptr<Communicator>> links;
  int replicas = 1;
  int replica = 0;  // this rank's

  // The first rank of a replica other than 0: it takes its replica's plans from the front end.
  bool leader() const { return replica > 0 && groups->world->rank() == 0; }

  ~DataParallelRanks();
  DataParallelRanks() = default;
  DataParallelRanks(DataParallelRanks&&) = default;
  DataParallelRanks& operator=(DataParallelRanks&&) = default;
};

// The layout: replica k holds the job's ranks [k * per_replica, (k + 1) * per_replica) and its first rank
// leads it.
constexpr int replica_of_rank(int rank, int per_replica) { return rank / per_replica; }
constexpr int replica_leader(int replica, int per_replica) { return replica * per_replica; }

// Whether `size` processes hold dp replicas of a tp x ep x pp x cp grid; the error names the numbers.
Status check_data_parallel_grid(int size, int dp, int tp, int pp, int ep, int cp);
// Splits the job into replicas and each replica into its grid (check_data_parallel_grid first). dp 1: the
// job's communicator is split once into the replica's world (the same ranks), so the layout is one shape.
// link_leaders false: no links (prefill/decode disaggregation lays its roles out as such groups of ranks,
// the decode group first, and its messages go over the job's communicator).
Result<DataParallelRanks> make_data_parallel_ranks(std::unique_ptr<Communicator> job, int dp, int tp, int pp, int ep,
                                                   int cp, bool link_leaders = true);

}  // namespace kestrel
