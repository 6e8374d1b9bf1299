// Micro-benchmarks of the row-dot kernels per weight type and ISA level, reported as weight bytes/s
// (decode is bound by how fast weights stream). Run: build/bench/kestrel_bench_kernels
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "compute/cpu/dot.h"
#include "quant/quantize.h"

namespace {

using kestrel::DType;
using kestrel::Isa;

void BM_MatVec(benchmark::State& state, DType type, Isa isa) {
  const size_t n_in = 2048, n_rows = 2048;  // one TinyLlama attention matrix
  const size_t rb = kestrel::row_bytes(type, n_in);
  std::vector<uint8_t> w(rb * n_rows);      // [n_rows, row bytes]
  std::vector<float> x(n_in), row(n_in);    // [n_in]
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  for (auto& v : x) v = dist(rng);
  for (size_t r = 0; r < n_rows; ++r) {
    for (auto& v : row) v = dist(rng) * 0.05f;
    kestrel::quantize_row(type, row.data(), w.data() + r * rb, n_in);
  }
  const kestrel::DotFn dot = kestrel::dot_kernel(type, isa);
  float sink = 0;
  for (auto _ : state) {
    for (size_t r = 0; r < n_rows; ++r) sink += dot(w.data() + r * rb, x.data(), n_in);
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.size()));
}

void register_all() {
  for (Isa isa : kestrel::runnable_isas())
    for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
      benchmark::RegisterBenchmark(
          (std::string("matvec_2048x2048/") + kestrel::dtype_name(type) + "/" + kestrel::isa_name(isa)).c_str(),
          BM_MatVec, type, isa);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
