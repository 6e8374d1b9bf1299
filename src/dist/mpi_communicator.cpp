// The Open MPI communicator (dist/communicator.h): MPI_COMM_WORLD, floats as MPI_FLOAT. Compiled only when
// CMake finds MPI (KESTREL_HAVE_MPI). MPI's default error handler (errors are fatal, the job ends) stays:
// a collective that fails has no sensible local recovery.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <list>
#include <optional>
#include <thread>
#include <vector>

#include "dist/backoff.h"
#include "dist/communicator.h"

namespace kestrel {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  // comm: MPI_COMM_WORLD (this communicator finalises MPI when destroyed) or one split from it (freed).
  // thread_level: what MPI_Init_thread provided.
  MpiCommunicator(MPI_Comm comm, int thread_level) : comm_(comm), thread_level_(thread_level) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (!async_.empty()) MPI_Waitall(static_cast<int>(async_.size()), requests().data(), MPI_STATUSES_IGNORE);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    else MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool threads_at_once() const override { return thread_level_ >= MPI_THREAD_MULTIPLE; }

  void all_reduce_sum(float* data, size_t n) override {
    Timed t(*this, n * sizeof(float));
    for (size_t done = 0; done < n;) {  // MPI counts are int
      const int count = static_cast<int>(std::min<size_t>(n - done, kMaxCount));
      MPI_Allreduce(MPI_IN_PLACE, data + done, count, MPI_FLOAT, MPI_SUM, comm_);
      done += static_cast<size_t>(count);
    }
  }
  void broadcast(void* data, size_t bytes, int root) override {
    Timed t(*this, rank_ == root ? bytes : 0);
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int count = static_cast<int>(std::min<size_t>(bytes - done, kMaxCount));
      MPI_Bcast(p + done, count, MPI_BYTE, root, comm_);
      done += static_cast<size_t>(count);
    }
  }
  void broadcast_patiently(void* data, size_t bytes, int root) override {
    if (bytes > kMaxCount) abort("broadcast_patiently of " + std::to_string(bytes) + " bytes: more than MPI's int count", 1);
    Timed t(*this, rank_ == root ? bytes : 0);
    MPI_Request request;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &request);
    const auto start = std::chrono::steady_clock::now();
    Backoff backoff(std::chrono::microseconds(20), std::chrono::microseconds(1000));
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(1)) backoff.nap();  // spin at first
    }
  }
  void all_gather(const float* in, size_t n, float* out) override {
    Timed t(*this, n * sizeof(float));
    if (n > kMaxCount) abort("all_gather of " + std::to_string(n) + " floats per rank: more than MPI's int count", 1);
    MPI_Allgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, comm_);
  }
  void barrier() override {
    Timed t(*this, 0);
    MPI_Barrier(comm_);
  }
  void send(const void* data, size_t bytes, int dest) override {
    Timed t(*this, bytes);
    const auto* p = static_cast<const char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int count = static_cast<int>(std::min<size_t>(bytes - done, kMaxCount));
      MPI_Send(p + done, count, MPI_BYTE, dest, kPointToPointTag, comm_);
      done += static_cast<size_t>(count);
    }
  }
  void recv(void* data, size_t bytes, int source) override {
    Timed t(*this, 0);
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int count = static_cast<int>(std::min<size_t>(bytes - done, kMaxCount));
      MPI_Recv(p + done, count, MPI_BYTE, source, kPointToPointTag, comm_, MPI_STATUS_IGNORE);
      done += static_cast<size_t>(count);
    }
  }
  void send_recv(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes, int source) override {
    if (send_bytes > kMaxCount || recv_bytes > kMaxCount) abort("send_recv of more than MPI's int count", 1);
    Timed t(*this, send_bytes);
    MPI_Sendrecv(send_data, static_cast<int>(send_bytes), MPI_BYTE, dest, kPointToPointTag, recv_data,
                 static_cast<int>(recv_bytes), MPI_BYTE, source, kPointToPointTag, comm_, MPI_STATUS_IGNORE);
  }
  void send_async(std::vector<uint8_t> message, int dest) override {
    if (message.size() > kMaxCount) abort("send_async of " + std::to_string(message.size()) + " bytes: more than 1 GiB", 1);
    ++stats_.messages;
    stats_.bytes += message.size();
    AsyncSend& s = async_.emplace_back();
    s.message = std::move(message);
    MPI_Isend(s.message.data(), static_cast<int>(s.message.size()), MPI_BYTE, dest, kPointToPointTag, comm_, &s.request);
  }
  size_t sends_in_flight() override {
    for (auto it = async_.begin(); it != async_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? async_.erase(it) : std::next(it);
    }
    return async_.size();
  }
  std::optional<Incoming> probe(int source) override {
    int waiting = 0;
    MPI_Status status;
    MPI_Iprobe(source == kAnySource ? MPI_ANY_SOURCE : source, kPointToPointTag, comm_, &waiting, &status);
    if (!waiting) return std::nullopt;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    return Incoming{status.MPI_SOURCE, static_cast<size_t>(count)};
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part;
    MPI_Comm_split(comm_, color, key, &part);
    return std::make_unique<MpiCommunicator>(part, thread_level_);
  }
  [[noreturn]] void abort(const std::string& why, int code) override {
    std::fprintf(stderr, "kestrel: rank %d: %s\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);  // the whole job, not just this communicator's ranks
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever did
  }

 private:
  static constexpr size_t kMaxCount = size_t{1} << 30;
  static constexpr int kPointToPointTag = 7;
  // Counts one collective call: its bytes and the time until it returns.
  struct Timed {
    Timed(MpiCommunicator& c, size_t bytes) : comm(c), start(std::chrono::steady_clock::now()) {
      ++comm.stats_.messages;
      comm.stats_.bytes += bytes;
    }
    ~Timed() { comm.stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    MpiCommunicator& comm;
    std::chrono::steady_clock::time_point start;
  };
  struct AsyncSend {
    std::vector<uint8_t> message;  // kept until sent
    MPI_Request request;
  };
  std::vector<MPI_Request> requests() {
    std::vector<MPI_Request> r;
    for (AsyncSend& s : async_) r.push_back(s.request);
    return r;
  }
  MPI_Comm comm_;
  int thread_level_;
  int rank_ = 0, size_ = 1;
  std::list<AsyncSend> async_;  // a list: MPI holds the request and buffer addresses until done
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Error{"MPI is already initialised in this process: make one communicator per process"};
  // At least serialized: a server's engine thread makes the calls while serving, its main thread at start
  // and end. Multiple where the library has it: data-parallel replicas over ranks have an engine thread
  // per replica on rank 0, each on its own communicator.
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return Error{"MPI_Init_thread failed"};
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Error{"this MPI library cannot be called from more than one thread (MPI_THREAD_SERIALIZED)"};
  }
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, provided));
}

}  // namespace kestrel
