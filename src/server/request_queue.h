// Where the HTTP server sends requests: one engine's loop (server/engine_loop.h) or a router over several
// data-parallel replicas (server/replica_router.h). Results come back through each request's channel.
//
// Contract: thread-safe. submit() refuses (returns false) when max_pending() requests are already queued or
// running; cancel() ends a request early (a no-op once it finished) and marks its channel cancelled.
#pragma once
#include <cstddef>
#include <future>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "server/request_channel.h"

namespace kestrel {

class RequestQueue {
 public:
  virtual ~RequestQueue() = default;
  virtual bool submit(Request request, std::shared_ptr<RequestChannel> channel) = 0;
  virtual void cancel(const std::shared_ptr<RequestChannel>& channel) = 0;
  virtual size_t n_pending() const = 0;
  virtual size_t max_pending() const = 0;
};

// A batch of inputs to embed (one /v1/embeddings request) and where its vectors go.
struct EmbeddingJob {
  std::vector<std::vector<int32_t>> inputs;                        // token ids of each input
  std::promise<Result<std::vector<std::vector<float>>>> vectors;  // [inputs][n_embd], or why not
};

// Where the HTTP server sends embedding requests (the engine thread that owns the model computes them
// between steps). Thread-safe. submit() refuses (returns false) when the queue is full or stopping.
class EmbeddingQueue {
 public:
  virtual ~EmbeddingQueue() = default;
  virtual bool submit_embeddings(std::shared_ptr<EmbeddingJob> job) = 0;
};

}  // namespace kestrel
