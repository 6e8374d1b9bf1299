// The Open MPI communicator (dist/communicator.h): MPI_COMM_WORLD, floats as MPI_FLOAT. Compiled only when
// CMake finds MPI (KESTREL_HAVE_MPI). MPI's default error handler (errors are fatal, the job ends) stays:
// a collective that fails has no sensible local recovery.
#include <mpi.h>

#include <chrono>
#include <cstdio>

#include "dist/communicator.h"

namespace kestrel {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(float* data, size_t n) override {
    Timed t(*this, n * sizeof(float));
    for (size_t done = 0; done < n;) {  // MPI counts are int
      const int count = static_cast<int>(std::min<size_t>(n - done, kMaxCount));
      MPI_Allreduce(MPI_IN_PLACE, data + done, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      done += static_cast<size_t>(count);
    }
  }
  void broadcast(void* data, size_t bytes, int root) override {
    Timed t(*this, rank_ == root ? bytes : 0);
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int count = static_cast<int>(std::min<size_t>(bytes - done, kMaxCount));
      MPI_Bcast(p + done, count, MPI_BYTE, root, MPI_COMM_WORLD);
      done += static_cast<size_t>(count);
    }
  }
  void all_gather(const float* in, size_t n, float* out) override {
    Timed t(*this, n * sizeof(float));
    if (n > kMaxCount) abort("all_gather of " + std::to_string(n) + " floats per rank: more than MPI's int count", 1);
    MPI_Allgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, MPI_COMM_WORLD);
  }
  void barrier() override {
    Timed t(*this, 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  [[noreturn]] void abort(const std::string& why, int code) override {
    std::fprintf(stderr, "kestrel: rank %d: %s\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever did
  }

 private:
  static constexpr size_t kMaxCount = size_t{1} << 30;
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
  int rank_ = 0, size_ = 1;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Error{"MPI is already initialised in this process: make one communicator per process"};
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return Error{"MPI_Init failed"};
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>());
}

}  // namespace kestrel
