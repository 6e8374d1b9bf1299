// Block pool bookkeeping and the thread pool.
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/thread_pool.h"
#include "kv/block_pool.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(BlockPool, AllocatesLowestFreeFirstAndCountsRefs) {
  BlockPool pool(4);
  EXPECT_EQ(*pool.allocate(), 0);
  EXPECT_EQ(*pool.allocate(), 1);
  EXPECT_EQ(*pool.allocate(), 2);
  pool.retain(1);
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.release(1);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(1);
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(*pool.allocate(), 1);  // lowest free id
  EXPECT_EQ(*pool.allocate(), 3);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_free() + pool.n_in_use(), pool.n_blocks());
}

TEST(BlockTable, ReservesWholePagesOrNothing) {
  BlockPool pool(11);
  BlockTable a, b;
  ASSERT_TRUE(a.reserve(pool, 48, 16));
  EXPECT_EQ(a.ids(), (std::vector<int32_t>{0, 1, 2}));
  ASSERT_TRUE(a.reserve(pool, 49, 16));
  EXPECT_EQ(a.ids().size(), 4u);
  ASSERT_TRUE(b.reserve(pool, 16 * 7, 16));
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_FALSE(b.reserve(pool, 16 * 8, 16));
  EXPECT_EQ(b.ids().size(), 7u);  // unchanged on failure
  a.release_all(pool);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_TRUE(a.ids().empty());
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 7u, 100u, 1001u}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_thread{0};
      for (int rep = 0; rep < 50; ++rep) {
        // Alternate fixed and dynamic splits so each starts from the other's leftover state.
        const auto body = [&](size_t b, size_t e, int thread) {
          if (thread < 0 || thread >= threads || (e - b < 4 && e != n)) ++bad_thread;  // at least min_chunk
          for (size_t i = b; i < e; ++i) ++hits[i];
        };
        if (rep % 2) pool.parallel_for_dynamic(n, 4, body);
        else pool.parallel_for(n, 4, [&](size_t b, size_t e, int thread) {
          if (thread < 0 || thread >= threads || b % 4 != 0) ++bad_thread;
          for (size_t i = b; i < e; ++i) ++hits[i];
        });
      }
      EXPECT_EQ(bad_thread.load(), 0);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 50) << threads << " threads, n=" << n << " i=" << i;
    }
  }
}

// A loop of fewer than two grains is not worth a hand-off: the calling thread runs all of it in one call.
TEST(ThreadPool, LoopsOfUnderTwoGrainsRunInlineInOneCall) {
  ThreadPool pool(2);
  for (bool dynamic : {false, true})
    for (size_t n : {1u, 5u, 7u, 8u}) {
      std::vector<std::array<size_t, 3>> calls;  // (begin, end, thread): only the caller appends, or the check fails
      std::mutex mutex;
      const auto body = [&](size_t b, size_t e, int thread) {
        std::lock_guard<std::mutex> lock(mutex);
        calls.push_back({b, e, static_cast<size_t>(thread)});
      };
      if (dynamic) pool.parallel_for_dynamic(n, 4, body);
      else pool.parallel_for(n, 4, body);
      if (n < 8) {
        ASSERT_EQ(calls.size(), 1u) << n;
        EXPECT_EQ(calls[0], (std::array<size_t, 3>{0, n, 0})) << n;
      } else {
        size_t covered = 0;
        for (const auto& c : calls) covered += c[1] - c[0];
        EXPECT_EQ(covered, n);
      }
    }
}

// Dynamic loops: each thread starts on its own contiguous half, and a thread whose items go fast takes over
// most of a slow thread's half. The calling thread (index 0) sleeps on each item here.
TEST(ThreadPool, DynamicLoopsMoveWorkFromASlowThread) {
  ThreadPool pool(2);
  const size_t n = 64;
  std::vector<std::atomic<int>> owner(n);
  std::atomic<size_t> first_begin[2] = {n, n};
  pool.parallel_for_dynamic(n, 1, [&](size_t b, size_t e, int thread) {
    size_t expected = n;
    first_begin[thread].compare_exchange_strong(expected, b);
    for (size_t i = b; i < e; ++i) {
      owner[i] = thread + 1;
      if (thread == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(first_begin[0].load(), 0u);
  EXPECT_EQ(first_begin[1].load(), n / 2);
  size_t by_worker = 0;
  for (const auto& o : owner) {
    ASSERT_NE(o.load(), 0);
    by_worker += o.load() == 2;
  }
  EXPECT_GE(by_worker, 3 * n / 4);
}

// A worker that is not on a core (here: held in a signal handler, as a descheduled thread would be) must
// not hold up the loop: the running threads do its chunks. The old pool waited for every worker to check
// in, so these loops never returned while the worker was held.
std::atomic<bool> g_hold_thread{false};
extern "C" void hold_thread_handler(int) {
  while (g_hold_thread.load()) {
    const timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
}

std::set<long> thread_ids() {
  std::set<long> ids;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(dir))
      if (e->d_name[0] != '.') ids.insert(std::strtol(e->d_name, nullptr, 10));
    closedir(dir);
  }
  return ids;
}

TEST(ThreadPool, LoopsFinishWhileAWorkerIsNotRunning) {
  const std::set<long> before = thread_ids();
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the worker is waiting for a job
  std::vector<long> workers;
  for (long id : thread_ids())
    if (!before.count(id)) workers.push_back(id);
  ASSERT_EQ(workers.size(), 1u);
  struct sigaction action {};
  action.sa_handler = hold_thread_handler;
  struct sigaction old_action {};
  ASSERT_EQ(sigaction(SIGUSR2, &action, &old_action), 0);
  g_hold_thread = true;
  ASSERT_EQ(syscall(SYS_tgkill, getpid(), workers[0], SIGUSR2), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the handler is running

  const size_t n = 1000;
  std::vector<std::atomic<int>> hits(n);
  auto loops = std::async(std::launch::async, [&] {
    for (int rep = 0; rep < 200; ++rep) {
      const auto body = [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) ++hits[i];
      };
      if (rep % 2) pool.parallel_for_dynamic(n, 4, body);
      else pool.parallel_for(n, 4, body);
    }
  });
  const bool finished = loops.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  g_hold_thread = false;  // release the worker either way, so the pool can be destroyed
  loops.wait();
  sigaction(SIGUSR2, &old_action, nullptr);
  EXPECT_TRUE(finished) << "parallel loops waited for a worker that was not running";
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 200) << i;
  // And the worker takes part again once it runs.
  std::atomic<int> by_worker{0};
  for (int rep = 0; rep < 1000 && by_worker == 0; ++rep)
    pool.parallel_for(64, 1, [&](size_t, size_t, int thread) {
      if (thread == 1) ++by_worker;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
  EXPECT_GT(by_worker.load(), 0);
}

}  // namespace
}  // namespace kestrel
