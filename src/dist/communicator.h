// The processes a run is split over and the collective operations between them (DESIGN.md: dist/).
// One process without mpirun (LocalCommunicator: every collective is the identity); under mpirun, Open
// MPI's world (MpiCommunicator, built when CMake finds MPI). Every rank must make the same collective calls
// in the same order with the same sizes (MPI's rule); a rank that cannot go on calls abort(), which ends
// every rank of the job instead of leaving the others waiting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

// What a communicator has sent and waited for since it was made (or since reset_stats): collective calls,
// the bytes this rank contributed to them, and the wall time spent inside them.
struct CommStats {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local" or "mpi"
  // Whether threads of this process may make calls on different communicators at the same time
  // (MPI_THREAD_MULTIPLE; data-parallel replicas over ranks need it). Otherwise one thread at a time.
  virtual bool threads_at_once() const = 0;

  // data[n] <- the element-wise sum of every rank's data[n].
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // data[bytes] <- root's data[bytes] on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // The same for a message a rank may wait long for (a serving follower between steps): a rank that has
  // waited a millisecond sleeps between checks instead of spinning on a core. Every rank calls it for
  // the message (it does not pair with broadcast()).
  virtual void broadcast_patiently(void* data, size_t bytes, int root) = 0;
  // out[size()][n] <- every rank's in[n], in rank order, on every rank.
  virtual void all_gather(const float* in, size_t n, float* out) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
  // Point to point: data[bytes] to rank dest, which must receive it with recv(data, bytes, this rank).
  virtual void send(const void* data, size_t bytes, int dest) = 0;
  virtual void recv(void* data, size_t bytes, int source) = 0;
  // Both at once (no deadlock when every rank of a ring sends and receives): send_data[send_bytes] to dest,
  // recv_data[recv_bytes] from source.
  virtual void send_recv(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes,
                         int source) = 0;
  // Asynchronous point to point (prefill/decode disaggregation: messages overlapped with compute). The
  // message goes to dest in the background, kept here until sent; dest takes it whole with probe() and
  // recv(). Messages from one rank to another arrive in the order sent. At most 1 GiB each.
  virtual void send_async(std::vector<uint8_t> message, int dest) = 0;
  // Messages of send_async not yet sent (checking moves them on).
  virtual size_t sends_in_flight() = 0;
  // A message waiting to be received from source (kAnySource: any rank), without receiving it.
  struct Incoming {
    int source = 0;
    size_t bytes = 0;
  };
  static constexpr int kAnySource = -1;
  virtual std::optional<Incoming> probe(int source) = 0;
  // recv(), waiting for the message in naps (dist/backoff.h) instead of MPI's polling receive, so a rank
  // with other threads to run leaves them the core while another process computes.
  void recv_patiently(void* data, size_t bytes, int source);
  // A communicator over the ranks that pass the same color, ranked by key (then by rank here); every rank
  // calls it. The result must be destroyed before this one.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank of the job with exit status `code` after printing `why` on this one; never returns.
  [[noreturn]] virtual void abort(const std::string& why, int code) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// One process: rank 0 of 1.
std::unique_ptr<Communicator> make_local_communicator();

// True when this process was started by mpirun (Open MPI's or a PMI launcher's environment is set).
bool launched_by_mpirun();

// The world this process runs in: MPI's when launched by mpirun, else a local communicator. Initialises
// MPI at most once per process (the communicator finalises it when destroyed). Fails with a clear message
// when launched by mpirun but built without MPI.
Result<std::unique_ptr<Communicator>> launch_communicator();

}  // namespace kestrel
