#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dist/backoff.h"

namespace kestrel {

void Communicator::recv_patiently(void* data, size_t bytes, int source) {
  Backoff backoff(std::chrono::microseconds(20), std::chrono::microseconds(250));
  while (!probe(source)) backoff.nap();
  recv(data, bytes, source);
}

#if KESTREL_HAVE_MPI
// dist/mpi_communicator.cpp
Result<std::unique_ptr<Communicator>> make_mpi_communicator();
#endif

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  bool threads_at_once() const override { return true; }
  void all_reduce_sum(float*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void broadcast_patiently(void*, size_t, int) override {}
  void all_gather(const float* in, size_t n, float* out) override {
    if (out != in) std::memmove(out, in, n * sizeof(float));
  }
  void barrier() override {}
  void send(const void*, size_t, int dest) override { abort("send to rank " + std::to_string(dest) + " of a one-process run", 1); }
  void recv(void*, size_t, int source) override { abort("receive from rank " + std::to_string(source) + " of a one-process run", 1); }
  void send_recv(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes, int source) override {
    if (dest != 0 || source != 0 || send_bytes != recv_bytes) abort("send_recv beyond rank 0 of a one-process run", 1);
    if (recv_data != send_data) std::memmove(recv_data, send_data, send_bytes);
  }
  void send_async(std::vector<uint8_t>, int dest) override { abort("send to rank " + std::to_string(dest) + " of a one-process run", 1); }
  size_t sends_in_flight() override { return 0; }
  std::optional<Incoming> probe(int) override { return std::nullopt; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalCommunicator>(); }
  [[noreturn]] void abort(const std::string& why, int code) override {
    std::fprintf(stderr, "kestrel: %s\n", why.c_str());
    std::exit(code);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

Result<std::unique_ptr<Communicator>> launch_communicator() {
  if (!launched_by_mpirun()) return make_local_communicator();
#if KESTREL_HAVE_MPI
  return make_mpi_communicator();
#else
  return Error{"launched by mpirun, but this kestrel was built without MPI (install libopenmpi-dev and rebuild)"};
#endif
}

}  // namespace kestrel
