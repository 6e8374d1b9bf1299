#include "dist/data_parallel_ranks.h"

#include <string>

namespace kestrel {

DataParallelRanks::~DataParallelRanks() {
  links.clear();
  groups.reset();
  job.reset();
}

Status check_data_parallel_grid(int size, int dp, int tp, int pp, int ep, int cp) {
  if (dp < 1) return Error{"--dp must be at least 1"};
  if (size % dp != 0)
    return Error{"launched as " + std::to_string(size) + " processes, which do not split into --dp " + std::to_string(dp) +
                 " replicas of equal size (each replica runs on its own --tp x --ep x --pp x --cp ranks)"};
  if (Status s = check_process_grid(size / dp, tp, pp, ep, cp); !s.ok())
    return Error{(dp > 1 ? "each of --dp " + std::to_string(dp) + " replicas: " : std::string()) + s.error()};
  return {};
}

Result<DataParallelRanks> make_data_parallel_ranks(std::unique_ptr<Communicator> job, int dp, int tp, int pp, int ep,
                                                   int cp, bool link_leaders) {
  if (Status s = check_data_parallel_grid(job->size(), dp, tp, pp, ep, cp); !s.ok()) return Error{s.error()};
  DataParallelRanks r;
  const int rank = job->rank(), per_replica = job->size() / dp;
  r.replicas = dp;
  r.replica = replica_of_rank(rank, per_replica);
  auto groups = make_process_groups(job->split(r.replica, rank), tp, pp, ep, cp);
  if (!groups.ok()) return Error{groups.error()};  // not reached: the grid was checked
  r.groups = std::make_unique<ProcessGroups>(std::move(groups).value());
  // Link k joins the front end (rank 0) and replica k's leader; every rank takes part in every split.
  for (int k = 1; link_leaders && k < dp; ++k) {
    const int leader = replica_leader(k, per_replica);
    const bool member = rank == 0 || rank == leader;
    std::unique_ptr<Communicator> link = job->split(member ? 0 : 1, rank);
    if (member) r.links.push_back(std::move(link));
  }
  r.job = std::move(job);
  return r;
}

}  // namespace kestrel
