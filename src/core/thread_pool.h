// A fixed set of worker threads that run one parallel loop at a time.
// The calling thread takes part, so ThreadPool(1) runs everything inline.
// Contract: parallel_for is called from one thread at a time (the engine thread); the body must not
// call parallel_for itself.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
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

  // Runs body over [0, n) with work stealing, so a thread slowed by its core's other load does less of the
  // work: each thread starts on its own contiguous range and takes it front to back in shares of what is
  // left (never fewer than `min_chunk` items); a thread whose range is empty takes the back half of
  // another's. A thread's consecutive takes are thus contiguous (streaming kernels keep prefetching
  // across them) and the threads finish close together. For loops of many equal-cost items (the row
  // groups of a GEMM). Each body call covers one chunk; a thread may make several calls.
  void parallel_for_dynamic(size_t n, size_t min_chunk, const std::function<void(size_t, size_t, int)>& body);

 private:
  void worker_loop(int thread_index);
  void run_chunk(int thread_index);
  void run(size_t n, size_t grain, bool dynamic, const std::function<void(size_t, size_t, int)>& body);
  // Dynamic loops: [begin, end) <- the next share of this thread's range; false when it is empty.
  bool take_front(int thread_index, size_t& begin, size_t& end);
  // Moves the back half of another thread's remaining range into this thread's; false when none is left.
  bool steal(int thread_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Sleeping: a worker that spun too long without work waits on wake_; run() takes the mutex and notifies
  // only when sleepers_ says one does, so a round trip between busy threads touches no lock.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  // The counters each sit on their own cache line: workers spin on generation_ while chunks are taken from
  // ranges_ and finishes counted in pending_, and a shared line would bounce between the cores.
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  // The current job; written by the caller before generation_ is bumped (release), read by workers after
  // they see the new generation (acquire).
  const std::function<void(size_t, size_t, int)>* body_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;
  bool dynamic_ = false;  // work stealing over ranges_ instead of one fixed range per thread
  // A dynamic loop's untaken items per thread: [front, back) packed as back << 32 | front, one cache line
  // each (the owner takes from the front, thieves from the back).
  struct alignas(64) StealRange {
    std::atomic<uint64_t> bounds{0};
  };
  std::unique_ptr<StealRange[]> ranges_;  // [n_threads]
};

}  // namespace kestrel
