// How finely the compute loops split their work over the thread pool. Handing tasks to a worker and
// waiting for it costs about half a microsecond on a quiet machine (kestrel_bench_kernels
// --benchmark_filter=ThreadPoolBarrier) and several when the cores are shared, so no task gets fewer than
// kMinTaskMacs multiply-adds (a few microseconds of arithmetic), and a loop with less work than that in all
// runs on the calling thread. Without this floor a model of 64-wide layers (stories260K: ~40 loops per
// token, each a few hundred nanoseconds of work) decoded 2.3x slower on two threads than on one; the
// matrices of a 1B model (2048 inputs: 32768 multiply-adds per 16-row group and token) split as before.
#pragma once
#include <algorithm>
#include <cstddef>

namespace kestrel {

constexpr size_t kMinTaskMacs = 32768;

// Items per task for a loop whose items cost item_macs multiply-adds each: enough for kMinTaskMacs, at least
// min_items, rounded up to a multiple of min_items (so tiles stay whole).
constexpr size_t grain_for_macs(size_t item_macs, size_t min_items = 1) {
  const size_t macs = std::max<size_t>(item_macs, 1);
  const size_t items = (kMinTaskMacs + macs - 1) / macs;
  return std::max(min_items, (items + min_items - 1) / min_items * min_items);
}

}  // namespace kestrel
