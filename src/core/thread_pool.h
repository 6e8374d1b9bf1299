// A fixed set of worker threads that run one parallel loop at a time.
// The calling thread takes part, so ThreadPool(1) runs everything inline.
// Contract: parallel_for is called from one thread at a time (the engine thread); the body must not
// call parallel_for itself.
//
// Sharing the CPU: no thread of the pool waits without bound on another being on a core. Every chunk of a
// loop can be run by any thread (a thread that finds its own part done takes what another has not
// started), so a loop finishes as soon as the threads that are running have done the work, even when a
// worker was never scheduled. A loop's caller waits only for workers that are inside a chunk. Waiting
// threads spin for a bounded time (kSpin), then yield (kYield), then sleep on a futex.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  // How long a waiting thread spins, then yields, before it sleeps. Consecutive loops of a forward pass
  // arrive microseconds apart, so a short spin keeps the round trip cheap on a quiet machine, while a
  // thread that shares its core with other work gives the core up soon.
  static constexpr std::chrono::microseconds kSpin{30};
  static constexpr std::chrono::microseconds kYield{100};

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs body(begin, end, thread_index) over [0, n) split into contiguous chunks, one per thread, and
  // returns when all chunks are done. Chunk boundaries are multiples of `grain`, the least work worth
  // handing to another thread: a loop of fewer than two grains runs on the calling thread, in one call.
  // thread_index is the thread that runs the call (for per-thread scratch); a thread whose own chunk is
  // done runs a chunk no other thread has started, so one thread may make several calls.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& body);

  // Runs body over [0, n) with work stealing, so a thread slowed by its core's other load does less of the
  // work: each thread starts on its own contiguous range and takes it front to back in shares of what is
  // left (never fewer than `min_chunk` items); a thread whose range is empty takes the back half of
  // another's. A thread's consecutive takes are thus contiguous (streaming kernels keep prefetching
  // across them) and the threads finish close together. For loops of many equal-cost items (the row
  // groups of a GEMM). Each body call covers one chunk; a thread may make several calls. A loop of fewer
  // than two min_chunks runs on the calling thread, in one call.
  void parallel_for_dynamic(size_t n, size_t min_chunk, const std::function<void(size_t, size_t, int)>& body);

 private:
  void worker_loop(int thread_index);
  // Runs chunks (own range first, then others') until no chunk is left to start.
  void run_chunks(int thread_index);
  void run(size_t n, size_t grain, bool dynamic, const std::function<void(size_t, size_t, int)>& body);
  // [begin, end) <- the next piece of this thread's range (a share of it, or all of it for fixed loops);
  // false when it is empty.
  bool take_front(int thread_index, size_t& begin, size_t& end);
  // Moves part of another thread's remaining range (the back half, or all of it for fixed loops) into this
  // thread's; false when none is left.
  bool steal(int thread_index);
  // Worker side of a job: enter it if it is still open (false: the caller finished without this worker);
  // leave wakes the caller when it was the last one inside a closed job.
  bool try_enter(uint32_t generation);
  void leave();
  // Waits until generation_ differs from seen (spin, yield, sleep) and returns it.
  uint32_t wait_for_job(uint32_t seen);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The job's generation: bumped by the caller to publish a job (and by the destructor); workers wait on it.
  alignas(64) std::atomic<uint32_t> generation_{0};
  // Who is inside the current job: generation << 32 | open << 31 | number of workers inside. A worker
  // enters only while the job is open; the caller closes it once every chunk has been started and then
  // waits for the count to reach zero, so a worker that arrives late never touches a finished job.
  alignas(64) std::atomic<uint64_t> job_state_{0};
  std::atomic<bool> stopping_{false};
  // The current job; written by the caller before generation_ is bumped (release), read by workers after
  // they enter it (acquire).
  const std::function<void(size_t, size_t, int)>* body_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;
  bool dynamic_ = false;  // shares and halves of ranges instead of whole ranges
  // Each thread's untaken grains: [front, back) packed as back << 32 | front, one cache line each (the
  // owner takes from the front, thieves from the back).
  struct alignas(64) StealRange {
    std::atomic<uint64_t> bounds{0};
  };
  std::unique_ptr<StealRange[]> ranges_;  // [n_threads]
};

}  // namespace kestrel
