// A fixed set of worker threads that run one parallel loop at a time.
// The calling thread takes part, so ThreadPool(1) runs everything inline.
// Contract: parallel_for is called from one thread at a time (the engine thread); the body must not
// call parallel_for itself.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs body(begin, end, thread_index) over [0, n) split into contiguous chunks, one per thread,
  // and returns when all chunks are done. Chunk boundaries are multiples of `grain`.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& body);

  // Runs body over [0, n) in chunks that the threads take in turn as they finish, so a thread slowed by
  // its core's other load does less of the work. Each take is a share of the items left, never fewer than
  // `min_chunk` (guided scheduling): early chunks are large, the last ones small, so the threads finish
  // close together. For loops of many equal-cost items (the row groups of a GEMM). Each body call covers
  // one chunk; a thread may make several calls.
  void parallel_for_dynamic(size_t n, size_t min_chunk, const std::function<void(size_t, size_t, int)>& body);

 private:
  void worker_loop(int thread_index);
  void run_chunk(int thread_index);
  void run(size_t n, size_t grain, bool dynamic, const std::function<void(size_t, size_t, int)>& body);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Sleeping: a worker that spun too long without work waits on wake_; run() takes the mutex and notifies
  // only when sleepers_ says one does, so a round trip between busy threads touches no lock.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  // The counters each sit on their own cache line: workers spin on generation_ while chunks are taken from
  // next_ and finishes counted in pending_, and a shared line would bounce between the cores.
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  // The current job; written by the caller before generation_ is bumped (release), read by workers after
  // they see the new generation (acquire).
  const std::function<void(size_t, size_t, int)>* body_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;
  bool dynamic_ = false;           // chunks taken from next_ instead of one fixed range per thread
  alignas(64) std::atomic<size_t> next_{0};  // the next untaken item of a dynamic loop
};

}  // namespace kestrel
