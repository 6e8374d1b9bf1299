// The prefill side of prefill/decode disaggregation (issue 16). A prefill rank holds the whole model, its
// own KV pages and the prefix cache; it computes the prompts rank 0 sends it (continuous batching with
// chunked prefill, as the engine does) and sends each prompt's KV pages to rank 0 as they complete — a
// chunk's pages leave in the background while the next chunk computes — then the last prompt token's logits
// (rank 0 samples the first token and decodes from there). A finished prompt's pages stay in this rank's
// prefix cache for the next request sharing its prefix; a cancelled prompt's pages go back at once.
//
// A prefill group may split its model over several ranks by --tp (dist/data_parallel_ranks.h lays the roles
// out: the decode group first, then the prefill groups, each of the same size): its first rank, the leader,
// schedules and relays each step plan to the others (engine/step_plan_relay.h), and every rank of the group
// sends its share of each computed page (its KV heads) to rank 0, which hands each rank of the decode group
// the share of the same tensor rank with its step plans.
//
// Contract: every rank of a prefill group calls serve_prefills (the leader: rank 0 of group) or
// follow_prefills (the others) with the model and the EngineConfig rank 0 uses (same page size and KV types:
// pages cross over as bytes); rank 0 runs a PrefillClient (engine/prefill_client.h). Both return once rank 0
// sends Stop, after everything this rank sent arrived. With a group of more than one rank, MPI must allow
// calls from several threads (Communicator::threads_at_once).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kestrel {

// job: every rank (rank 0 decodes); group: this prefill group (rank 0 of it this one). Returns the prompts
// prefilled.
int64_t serve_prefills(Communicator& job, Communicator& group, const Model& model, ThreadPool& pool,
                       const EngineConfig& config);
// The other ranks of a prefill group: run the leader's plans on their share of the model and send their
// share of the pages each plan exports.
void follow_prefills(Communicator& job, Communicator& group, const Model& model, ThreadPool& pool,
                     const EngineConfig& config);

}  // namespace kestrel
