#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kestrel {

namespace {
constexpr uint64_t pack_range(uint64_t front, uint64_t back) { return back << 32 | front; }
constexpr size_t range_front(uint64_t r) { return static_cast<size_t>(r & 0xFFFFFFFFu); }
constexpr size_t range_back(uint64_t r) { return static_cast<size_t>(r >> 32); }

// job_state_ layout: generation << 32 | open << 31 | workers inside.
constexpr uint64_t kOpen = uint64_t{1} << 31;
constexpr uint64_t kInsideMask = kOpen - 1;
constexpr uint32_t job_generation(uint64_t s) { return static_cast<uint32_t>(s >> 32); }

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waits until ready(): spins for ThreadPool::kSpin, then yields the core until kSpin + kYield have
// passed, then calls sleep() (which blocks until the awaited value may have changed) until ready().
// The clock is read every 64 spins so the bound holds whatever a pause costs on this CPU.
template <class Ready, class Sleep>
void wait_until(Ready ready, Sleep sleep) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int i = 1;; ++i) {
    if (ready()) return;
    cpu_relax();
    if (i % 64 == 0 && Clock::now() - start > ThreadPool::kSpin) break;
  }
  while (Clock::now() - start < ThreadPool::kSpin + ThreadPool::kYield) {
    if (ready()) return;
    std::this_thread::yield();
  }
  while (!ready()) sleep();
}
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), ranges_(std::make_unique<StealRange[]>(static_cast<size_t>(n_threads_))) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::take_front(int thread_index, size_t& begin, size_t& end) {
  std::atomic<uint64_t>& range = ranges_[static_cast<size_t>(thread_index)].bounds;
  uint64_t r = range.load(std::memory_order_relaxed);
  for (;;) {
    const size_t front = range_front(r), back = range_back(r);
    if (front >= back) return false;
    // Dynamic loops take a share of what is left: few atomic operations early, small pieces near the end
    // for thieves. Fixed loops take the whole range as one chunk.
    const size_t take = dynamic_ ? std::max<size_t>(1, (back - front) / 4) : back - front;
    if (range.compare_exchange_weak(r, pack_range(front + take, back), std::memory_order_relaxed)) {
      begin = front;
      end = front + take;
      return true;
    }
  }
}

bool ThreadPool::steal(int thread_index) {
  for (int k = 1; k < n_threads_; ++k) {
    std::atomic<uint64_t>& victim = ranges_[static_cast<size_t>((thread_index + k) % n_threads_)].bounds;
    uint64_t r = victim.load(std::memory_order_relaxed);
    for (;;) {
      const size_t front = range_front(r), back = range_back(r);
      if (front >= back) break;
      const size_t take = dynamic_ ? std::max<size_t>(1, (back - front) / 2) : back - front;
      if (victim.compare_exchange_weak(r, pack_range(front, back - take), std::memory_order_relaxed)) {
        ranges_[static_cast<size_t>(thread_index)].bounds.store(pack_range(back - take, back), std::memory_order_relaxed);
        return true;
      }
    }
  }
  return false;
}

void ThreadPool::run_chunks(int thread_index) {
  // Each thread walks its own contiguous range front to back, so the kernels' prefetching runs on from
  // one take into the next; a thread that runs out takes (part of) another's remaining range, so the work
  // of a thread that is not on a core gets done by one that is.
  size_t begin = 0, end = 0;
  for (;;) {
    if (take_front(thread_index, begin, end))  // ranges count grains: a chunk is whole grains, or ends at n
      (*body_)(begin * grain_, std::min(n_, end * grain_), thread_index);
    else if (!steal(thread_index))
      return;
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& body) {
  run(n, grain, false, body);
}

void ThreadPool::parallel_for_dynamic(size_t n, size_t min_chunk, const std::function<void(size_t, size_t, int)>& body) {
  run(n, min_chunk, true, body);
}

void ThreadPool::run(size_t n, size_t grain, bool dynamic, const std::function<void(size_t, size_t, int)>& body) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (n_threads_ == 1 || n < 2 * grain) return body(0, n, 0);  // one thread, or too little work to hand out
  if (n / grain >= 0xFFFFFFFFu) grain *= n / grain / 0xFFFFFFFEu + 1;  // ranges pack two 32-bit grain counts
  body_ = &body;
  n_ = n;
  grain_ = grain;
  dynamic_ = dynamic;
  const size_t n_grains = (n + grain - 1) / grain, nt = static_cast<size_t>(n_threads_);
  for (size_t t = 0; t < nt; ++t)  // one contiguous range of grains per thread
    ranges_[t].bounds.store(pack_range(n_grains * t / nt, n_grains * (t + 1) / nt), std::memory_order_relaxed);

  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  job_state_.store(uint64_t{generation} << 32 | kOpen, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);  // publishes the job
  generation_.notify_all();  // wakes sleeping workers; no system call when none sleeps
  run_chunks(0);
  // Every chunk has been started: close the job to latecomers and wait for the workers inside it.
  uint64_t state = job_state_.fetch_and(~kOpen, std::memory_order_acq_rel) & ~kOpen;
  wait_until([&] { return ((state = job_state_.load(std::memory_order_acquire)) & kInsideMask) == 0; },
             [&] { job_state_.wait(state, std::memory_order_acquire); });
}

bool ThreadPool::try_enter(uint32_t generation) {
  uint64_t s = job_state_.load(std::memory_order_acquire);
  for (;;) {
    if (job_generation(s) != generation || !(s & kOpen)) return false;
    if (job_state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

void ThreadPool::leave() {
  const uint64_t before = job_state_.fetch_sub(1, std::memory_order_acq_rel);
  if (!(before & kOpen) && (before & kInsideMask) == 1) job_state_.notify_all();  // the caller may sleep
}

uint32_t ThreadPool::wait_for_job(uint32_t seen) {
  uint32_t generation = seen;
  wait_until([&] { return (generation = generation_.load(std::memory_order_acquire)) != seen; },
             [&] { generation_.wait(seen, std::memory_order_acquire); });
  return generation;
}

void ThreadPool::worker_loop(int thread_index) {
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_job(seen);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (!try_enter(seen)) continue;  // the caller already did the work without this worker
    run_chunks(thread_index);
    leave();
  }
}

}  // namespace kestrel
