// The prefill side of prefill/decode disaggregation (issue 16). A prefill rank holds the whole model, its
// own KV pages and the prefix cache; it computes the prompts rank 0 sends it (continuous batching with
// chunked prefill, as the engine does) and sends each prompt's KV pages to rank 0 as they complete — a
// chunk's pages leave in the background while the next chunk computes — then the last prompt token's logits
// (rank 0 samples the first token and decodes from there). A finished prompt's pages stay in this rank's
// prefix cache for the next request sharing its prefix; a cancelled prompt's pages go back at once.
//
// Contract: every rank but 0 of a disaggregated job calls serve_prefills with the model and the EngineConfig
// rank 0 uses (same page size and KV types: pages cross over as bytes); rank 0 runs a PrefillClient
// (engine/prefill_client.h). Returns once rank 0 sends Stop, after everything this rank sent arrived.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kestrel {

// Returns the prompts prefilled.
int64_t serve_prefills(Communicator& world, const Model& model, ThreadPool& pool, const EngineConfig& config);

}  // namespace kestrel
