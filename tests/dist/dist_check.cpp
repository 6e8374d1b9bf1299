// Run under mpirun by tests/test_dist.cpp: every collective of the launched communicator (and send / recv,
// send_async / probe, split) checked against what each rank can compute alone. Prints "rank R of N: ok" and
// exits 0, or names the first mismatch and ends the job with status 1. `--fail-rank R`: rank R leaves without
// a word before the first collective (the others must not hang); `--abort-rank R`: rank R calls
// Communicator::abort.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace {

// Ends every rank: the others may be waiting in a collective this rank will not join.
[[noreturn]] void fail(kestrel::Communicator& c, const std::string& what) {
  c.abort("dist_check FAILED: " + what, 1);
  __builtin_unreachable();  // abort() is [[noreturn]], which a virtual call does not tell the compiler
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1, abort_rank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--abort-rank") == 0) abort_rank = std::atoi(argv[i + 1]);
  }
  auto launched = kestrel::launch_communicator();
  if (!launched.ok()) {
    std::fprintf(stderr, "dist_check: %s\n", launched.error().c_str());
    return 2;
  }
  kestrel::Communicator& c = **launched;
  const int r = c.rank(), n = c.size();
  if (r == fail_rank) std::_Exit(3);
  if (r == abort_rank) c.abort("asked to abort", 4);

  // all_reduce_sum: element i of rank r holds r + i / 8; the sum is n (n - 1) / 2 + n i / 8. Sizes past
  // one message and odd ones included.
  for (size_t len : {size_t{1}, size_t{7}, size_t{4096}, size_t{100003}}) {
    std::vector<float> v(len);  // [len]
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<float>(r) + static_cast<float>(i % 64) / 8;
    c.all_reduce_sum(v.data(), len);
    for (size_t i = 0; i < len; ++i) {
      const float want = static_cast<float>(n * (n - 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 64) / 8;
      if (std::fabs(v[i] - want) > 1e-4f * (1 + std::fabs(want))) fail(c, "all_reduce_sum at " + std::to_string(i));
    }
  }
  // broadcast from the last rank
  std::string text = r == n - 1 ? "from the last rank" : std::string(18, '?');
  c.broadcast(text.data(), text.size(), n - 1);
  if (text != "from the last rank") fail(c, "broadcast: " + text);
  // all_gather: rank r sends {r, 10 r, 100 r}
  const float mine[3] = {static_cast<float>(r), 10.f * r, 100.f * r};
  std::vector<float> all(3 * static_cast<size_t>(n), -1.f);  // [n][3]
  c.all_gather(mine, 3, all.data());
  for (int k = 0; k < n; ++k)
    if (all[3 * k] != static_cast<float>(k) || all[3 * k + 1] != 10.f * k || all[3 * k + 2] != 100.f * k) fail(c, "all_gather");
  c.barrier();
  // Counted: 4 reductions + 1 broadcast + 1 gather + 1 barrier (the broadcast's bytes on its root only).
  const kestrel::CommStats& s = c.stats();
  const uint64_t want_bytes = 4 * (1 + 7 + 4096 + 100003) + (r == n - 1 ? 18 : 0) + 12;
  if (n > 1 && (s.messages != 7 || s.bytes != want_bytes)) fail(c, "stats " + std::to_string(s.messages) + " " + std::to_string(s.bytes));
  // broadcast_patiently: the same message, waited for without spinning
  int64_t word = r == 0 ? 42 : 0;
  c.broadcast_patiently(&word, sizeof word, 0);
  if (word != 42) fail(c, "broadcast_patiently: " + std::to_string(word));
  // send / recv around a ring: rank r sends {r, r + 0.5} to r + 1 (even ranks first, so no two wait on
  // each other) and receives from r - 1.
  if (n > 1) {
    const float out[2] = {static_cast<float>(r), r + 0.5f};
    float in[2] = {-1, -1};
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r % 2 == 0) {
      c.send(out, sizeof out, next);
      c.recv(in, sizeof in, prev);
    } else {
      c.recv(in, sizeof in, prev);
      c.send(out, sizeof out, next);
    }
    if (in[0] != static_cast<float>(prev) || in[1] != prev + 0.5f) fail(c, "send/recv from " + std::to_string(prev));
  }
  // send_async / probe: every other rank sends rank 0 two messages of r + 1 and r + 2 bytes, each byte r, in
  // the background; rank 0 probes any source until it has them all, each rank's in the order sent.
  if (n > 1) {
    if (r != 0) {
      c.send_async(std::vector<uint8_t>(static_cast<size_t>(r + 1), static_cast<uint8_t>(r)), 0);
      c.send_async(std::vector<uint8_t>(static_cast<size_t>(r + 2), static_cast<uint8_t>(r)), 0);
      while (c.sends_in_flight() > 0) {}
    } else {
      if (c.probe(0)) fail(c, "probe found a message rank 0 never sent itself");
      std::vector<int> seen(static_cast<size_t>(n), 0);  // [n] messages taken from each rank
      for (int got = 0; got < 2 * (n - 1);) {
        const auto incoming = c.probe(kestrel::Communicator::kAnySource);
        if (!incoming) continue;
        const int from = incoming->source;
        std::vector<uint8_t> bytes(incoming->bytes);
        c.recv(bytes.data(), bytes.size(), from);
        if (from < 1 || from >= n || bytes.size() != static_cast<size_t>(from + 1 + seen[static_cast<size_t>(from)]))
          fail(c, "send_async from " + std::to_string(from) + ": " + std::to_string(bytes.size()) + " bytes");
        for (uint8_t b : bytes)
          if (b != from) fail(c, "send_async bytes from " + std::to_string(from));
        ++seen[static_cast<size_t>(from)];
        ++got;
      }
    }
    c.barrier();
  }
  // split: even and odd ranks, ranked in reverse; a sum within each part
  {
    auto part = c.split(r % 2, -r);
    const int part_size = (n + (r % 2 == 0 ? 1 : 0)) / 2;
    if (part->size() != part_size) fail(c, "split size " + std::to_string(part->size()));
    int above = 0;  // ranks of the same parity above this one come first
    for (int k = r + 2; k < n; k += 2) ++above;
    if (part->rank() != above) fail(c, "split rank " + std::to_string(part->rank()));
    float v = static_cast<float>(r);
    part->all_reduce_sum(&v, 1);
    float want = 0;
    for (int k = r % 2; k < n; k += 2) want += static_cast<float>(k);
    if (v != want) fail(c, "sum within a split part: " + std::to_string(v));
  }
  std::printf("rank %d of %d: ok (%s)\n", r, n, c.backend().c_str());
  return 0;
}
