#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kestrel {

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), ranges_(std::make_unique<StealRange[]>(static_cast<size_t>(n_threads_))) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between its check and its wait is now waiting
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
constexpr uint64_t pack_range(uint64_t front, uint64_t back) { return back << 32 | front; }
constexpr size_t range_front(uint64_t r) { return static_cast<size_t>(r & 0xFFFFFFFFu); }
constexpr size_t range_back(uint64_t r) { return static_cast<size_t>(r >> 32); }
}  // namespace

bool ThreadPool::take_front(int thread_index, size_t& begin, size_t& end) {
  std::atomic<uint64_t>& range = ranges_[static_cast<size_t>(thread_index)].bounds;
  uint64_t r = range.load(std::memory_order_relaxed);
  for (;;) {
    const size_t front = range_front(r), back = range_back(r);
    if (front >= back) return false;
    // A share of what is left: few atomic operations early, small pieces near the end for thieves.
    const size_t take = std::max<size_t>(1, (back - front) / 4);
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
      const size_t take = std::max<size_t>(1, (back - front) / 2);
      if (victim.compare_exchange_weak(r, pack_range(front, back - take), std::memory_order_relaxed)) {
        ranges_[static_cast<size_t>(thread_index)].bounds.store(pack_range(back - take, back), std::memory_order_relaxed);
        return true;
      }
    }
  }
  return false;
}

void ThreadPool::run_chunk(int thread_index) {
  if (dynamic_) {
    // Each thread walks its own contiguous range front to back, so the kernels' prefetching runs on from
    // one take into the next; a thread that runs out steals the back half of another's remaining range.
    size_t begin = 0, end = 0;
    for (;;) {
      if (take_front(thread_index, begin, end))  // ranges count grains: a chunk is whole grains, or ends at n
        (*body_)(begin * grain_, std::min(n_, end * grain_), thread_index);
      else if (!steal(thread_index))
        return;
    }
  }
  // Split [0, n_) into n_threads_ chunks aligned to grain_.
  const size_t n_grains = (n_ + grain_ - 1) / grain_;
  const size_t per = n_grains / n_threads_, extra = n_grains % n_threads_;
  const size_t t = static_cast<size_t>(thread_index);
  const size_t g_begin = t * per + std::min(t, extra);
  const size_t g_end = g_begin + per + (t < extra ? 1 : 0);
  const size_t begin = std::min(n_, g_begin * grain_), end = std::min(n_, g_end * grain_);
  if (begin < end) (*body_)(begin, end, thread_index);
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
  if (n_threads_ == 1 || n <= grain) return body(0, n, 0);  // one thread: nothing to balance
  if (dynamic && n / grain >= 0xFFFFFFFFu) dynamic = false;  // ranges pack two 32-bit grain counts
  body_ = &body;
  n_ = n;
  grain_ = grain;
  dynamic_ = dynamic;
  if (dynamic) {
    const size_t n_grains = (n + grain - 1) / grain, nt = static_cast<size_t>(n_threads_);
    for (size_t t = 0; t < nt; ++t)  // one contiguous range of grains per thread
      ranges_[t].bounds.store(pack_range(n_grains * t / nt, n_grains * (t + 1) / nt), std::memory_order_relaxed);
  }
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job (and orders the sleepers_ read)
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between its check and its wait is now waiting
    wake_.notify_all();
  }
  run_chunk(0);
  // Decode steps are short: spin on the counter rather than sleeping.
  while (pending_.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a while before sleeping: consecutive loops of a forward pass arrive microseconds apart.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
#if defined(__x86_64__)
      _mm_pause();
#endif
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stopping_.load(std::memory_order_acquire)) return;
    run_chunk(thread_index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kestrel
