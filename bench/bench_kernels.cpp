// Micro-benchmarks of the row-dot kernels per weight type and ISA level, reported as weight bytes/s
// (decode is bound by how fast weights stream). Run: build/bench/kestrel_bench_kernels
#include <benchmark/benchmark.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include "compute/cpu/dot.h"
#include "compute/cpu/isa.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "compute/cpu/packed_matrix.h"
#include "quant/gptq.h"
#include "quant/quantize.h"

namespace {

using kestrel::DType;
using kestrel::Isa;

// [n_rows, row bytes] of `type`: rows of N(0, 0.05) weights, quantized; rng advances.
std::vector<uint8_t> random_weights(DType type, size_t n_in, size_t n_rows, std::mt19937& rng) {
  const size_t rb = kestrel::row_bytes(type, n_in);
  std::vector<uint8_t> w(rb * n_rows);
  std::vector<float> row(n_in);
  std::normal_distribution<float> dist(0, 0.05f);
  for (size_t r = 0; r < n_rows; ++r) {
    for (auto& v : row) v = dist(rng);
    kestrel::quantize_row(type, row.data(), w.data() + r * rb, n_in);
  }
  return w;
}

// An n_rows x n_in weight matrix of `type` (random_weights) with the bytes it points at; movable (the
// vector's buffer moves with it), not copyable.
struct RandomMatrix {
  std::vector<uint8_t> bytes;  // [n_rows, row bytes]
  kestrel::WeightMatrix m;
  RandomMatrix(DType type, size_t n_in, size_t n_rows, std::mt19937& rng)
      : bytes(random_weights(type, n_in, n_rows, rng)),
        m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_rows), bytes.data(), kestrel::row_bytes(type, n_in)} {}
  RandomMatrix(RandomMatrix&&) = default;
  RandomMatrix(const RandomMatrix&) = delete;
};

// [n_tok, n_in / 32] 8-bit activation blocks of N(0, 1) values.
std::vector<kestrel::BlockQ8A> random_q8_activations(size_t n_in, int n_tok, std::mt19937& rng) {
  std::vector<kestrel::BlockQ8A> xq(n_in / 32 * static_cast<size_t>(n_tok));
  std::vector<float> x(n_in);
  std::normal_distribution<float> dist(0, 1);
  for (int t = 0; t < n_tok; ++t) {
    for (auto& v : x) v = dist(rng);
    kestrel::quantize_activations_q8a(x.data(), xq.data() + t * (n_in / 32), n_in);
  }
  return xq;
}

void BM_MatVec(benchmark::State& state, DType type, Isa isa) {
  const size_t n_in = 2048, n_rows = 2048;  // one TinyLlama attention matrix
  const size_t rb = kestrel::row_bytes(type, n_in);
  std::mt19937 rng(1);
  const std::vector<uint8_t> w = random_weights(type, n_in, n_rows, rng);  // [n_rows, row bytes]
  std::vector<float> x(n_in);                                              // [n_in]
  std::normal_distribution<float> dist(0, 1);
  for (auto& v : x) v = dist(rng);
  const kestrel::DotFn dot = kestrel::dot_kernel(type, isa);
  float sink = 0;
  for (auto _ : state) {
    for (size_t r = 0; r < n_rows; ++r) sink += dot(w.data() + r * rb, x.data(), n_in);
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.size()));
}

// The integer path: activations quantized to 8-bit blocks once, n_tok tokens per weight-row read.
void BM_MatVecQ8(benchmark::State& state, DType type, Isa isa, int n_tok) {
  const size_t n_in = 2048, n_rows = 2048, nb = n_in / 32;
  const size_t rb = kestrel::row_bytes(type, n_in);
  std::mt19937 rng(1);
  const std::vector<uint8_t> w = random_weights(type, n_in, n_rows, rng);       // [n_rows, row bytes]
  const std::vector<kestrel::BlockQ8A> xq = random_q8_activations(n_in, n_tok, rng);  // [n_tok, nb]
  std::vector<float> out(n_rows * n_tok);
  const kestrel::DotQ8Fn dot = kestrel::dot_q8_kernel(type, isa);
  for (auto _ : state) {
    for (size_t r = 0; r < n_rows; ++r) dot(w.data() + r * rb, xq.data(), nb, n_tok, n_in, out.data() + r, n_rows);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.size()));
}

// The packed integer GEMM (what matmul uses for Q4_0/Q8_0 weights): n_rows x 2048 weights against n_tok
// tokens. 2048 rows fit in cache; 32768 rows (64 MiB of Q8_0) stream from memory.
void BM_PackedGemm(benchmark::State& state, DType type, Isa isa, int n_tok, size_t n_rows) {
  const size_t n_in = 2048;
  if (!kestrel::PackedMatrix::supports(type, n_in, n_rows, isa)) {
    state.SkipWithError("no packed kernel for this type on this ISA");
    return;
  }
  std::mt19937 rng(1);
  const RandomMatrix w(type, n_in, n_rows, rng);
  const auto packed = kestrel::PackedMatrix::pack(w.m, isa);
  const std::vector<kestrel::BlockQ8A> xq = random_q8_activations(n_in, n_tok, rng);  // [n_tok, nb]
  std::vector<float> y(n_rows * n_tok);
  const auto gemm = kestrel::packed_gemm_kernel(packed->layout, isa);
  for (auto _ : state) {
    gemm(packed->view(), xq.data(), n_tok, y.data(), n_rows, 0, packed->n_groups());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * packed->bytes()));
  state.counters["GOPS"] = benchmark::Counter(2.0 * n_in * n_rows * n_tok * state.iterations(),
                                              benchmark::Counter::kIsRate);
}

// One token through a 65536 x 2048 packed matrix (about 100 MB: from memory, not cache) with two threads
// splitting its row groups as matmul does (ThreadPool::parallel_for_dynamic, each thread's prefetch
// running on into its next group): the decode GEMV at the machine's bandwidth, per type.
void BM_PackedGemvStream(benchmark::State& state, DType type, Isa isa) {
  const size_t n_in = 2048, n_rows = 65536, n_distinct = 2048;
  const size_t rb = kestrel::row_bytes(type, n_in);
  std::mt19937 rng(1);
  const std::vector<uint8_t> distinct = random_weights(type, n_in, n_distinct, rng);  // [n_distinct, row bytes]
  std::vector<uint8_t> w(rb * n_rows);                                                // [n_rows, row bytes]
  for (size_t r = 0; r < n_rows; r += n_distinct) std::copy(distinct.begin(), distinct.end(), w.begin() + r * rb);
  const kestrel::WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_rows), w.data(), rb};
  if (!kestrel::PackedMatrix::supports(type, n_in, n_rows, isa)) {
    state.SkipWithError("no packed kernel for this type on this ISA");
    return;
  }
  const auto packed = kestrel::PackedMatrix::pack(m);
  const std::vector<kestrel::BlockQ8A> xq = random_q8_activations(n_in, 1, rng);  // [1, nb]
  std::vector<float> y(n_rows);                                                     // [n_rows]
  const auto gemm = kestrel::packed_gemm_kernel(packed->layout, isa);
  kestrel::ThreadPool pool(2);
  for (auto _ : state) {
    pool.parallel_for_dynamic(static_cast<size_t>(packed->n_groups()), 1, [&](size_t begin, size_t end, int) {
      gemm(packed->view(packed->after_group(static_cast<int64_t>(end), nullptr)), xq.data(), 1, y.data(), n_rows,
           static_cast<int64_t>(begin), static_cast<int64_t>(end));
    });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * packed->bytes()));
}

// One decode step's GEMMs of a TinyLlama-1.1B-shaped model, `type` in its 22 layers (q k v in one pass, o,
// gate and up in one pass, down) and Q8_0 in the 32000-row output, each layer's weights packed in memory
// of their own (1.1 GB for Q8_0), through the engine's matmul entry points with `threads` threads on the
// detected ISA: the weight streaming of decode with its passes, without attention and the other
// per-token work, so a pruned or quantized type's whole-model ratio can be split into the GEMMs' and the rest's.
void BM_ModelDecodeGemms(benchmark::State& state, DType type, int threads) {
  const int64_t d = 2048, kv = 256, ff = 5632, vocab = 32000, layers = 22;
  struct Shape { DType type; int64_t n_in, n_out; };
  for (const Shape& s : {Shape{type, d, d}, Shape{type, d, kv}, Shape{type, d, ff}, Shape{type, ff, d}, Shape{DType::Q8_0, d, vocab}})
    if (!kestrel::PackedMatrix::supports(s.type, s.n_in, s.n_out, kestrel::detected_isa())) {
      state.SkipWithError("no packed kernel for a matrix of the model on this ISA");
      return;
    }
  std::mt19937 rng(1);
  const RandomMatrix q(type, d, d, rng), k(type, d, kv, rng), v(type, d, kv, rng), o(type, d, d, rng),
      gate(type, d, ff, rng), up(type, d, ff, rng), down(type, ff, d, rng), out(DType::Q8_0, d, vocab, rng);
  std::deque<kestrel::PackedMatrix> packs;  // every layer's own copy of the packed weights
  size_t bytes = 0;
  auto packed = [&](const RandomMatrix& source) {
    std::optional<kestrel::PackedMatrix> p = kestrel::PackedMatrix::pack(source.m);
    if (!p) throw std::runtime_error("PackedMatrix::pack refused a shape that supports() accepts");
    bytes += p->bytes();
    kestrel::WeightMatrix w = source.m;
    w.packed = &packs.emplace_back(std::move(*p));
    return w;
  };
  struct Layer { kestrel::WeightMatrix q, k, v, o, gate, up, down; };
  std::vector<Layer> ls;
  for (int64_t l = 0; l < layers; ++l) ls.push_back({packed(q), packed(k), packed(v), packed(o), packed(gate), packed(up), packed(down)});
  const kestrel::WeightMatrix output = packed(out);
  kestrel::ThreadPool pool(threads);
  // x [d] the residual stream (reset per layer: only the weights' traffic matters), ya / yb [ff] gate / up,
  // yq [d], yk / yv [kv], logits [vocab]
  std::vector<float> x(static_cast<size_t>(d), 0.5f), ya(static_cast<size_t>(ff)), yb(static_cast<size_t>(ff)),
      yq(static_cast<size_t>(d)), yk(kv), yv(kv), logits(static_cast<size_t>(vocab));
  for (auto _ : state) {
    for (const Layer& l : ls) {
      const kestrel::WeightMatrix qkv[] = {l.q, l.k, l.v};
      float* const outs[] = {yq.data(), yk.data(), yv.data()};
      kestrel::ops::matmul_many(pool, qkv, kestrel::ops::MatmulInput{x.data()}, outs, 1);
      kestrel::ops::matmul(pool, l.o, yq.data(), x.data(), 1, kestrel::ops::Accumulate::Yes);
      kestrel::ops::matmul_swiglu(pool, l.gate, l.up, kestrel::ops::MatmulInput{x.data()}, ya.data(), yb.data(), 1);
      kestrel::ops::matmul(pool, l.down, ya.data(), x.data(), 1, kestrel::ops::Accumulate::Yes);
      std::fill(x.begin(), x.end(), 0.5f);
    }
    kestrel::ops::matmul(pool, output, x.data(), logits.data(), 1, kestrel::ops::Accumulate::No);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// The packed float GEMM (F16/BF16 weights): the layout this ISA level packs into (BF16x16 with AVX-512
// BF16, else the Fma16 layouts), n_rows x 2048 weights against n_tok float tokens, one thread.
void BM_PackedGemmFloat(benchmark::State& state, DType type, Isa isa, int n_tok, size_t n_rows) {
  const size_t n_in = 2048;
  std::mt19937 rng(1);
  const RandomMatrix w(type, n_in, n_rows, rng);
  const auto packed = kestrel::PackedMatrix::pack(w.m, isa);
  if (!packed) {
    state.SkipWithError("no packed layout for this type on this ISA");
    return;
  }
  std::vector<float> x(n_in * static_cast<size_t>(n_tok));  // [n_tok, n_in]
  std::normal_distribution<float> dist(0, 1);
  for (auto& v : x) v = dist(rng);
  std::vector<uint16_t> xb(x.size());  // [n_tok, n_in] bf16 bits, for the BF16x16 kernel
  for (size_t i = 0; i < x.size(); ++i) xb[i] = kestrel::fp32_to_bf16(x[i]);
  std::vector<float> y(n_rows * static_cast<size_t>(n_tok));
  for (auto _ : state) {
    if (packed->layout == kestrel::PackedLayout::BF16x16)
      kestrel::packed_gemm_bf16_kernel(isa)(packed->view(), xb.data(), n_tok, y.data(), n_rows, 0, packed->n_groups());
    else
      kestrel::packed_gemm_f32_kernel(packed->layout, isa)(packed->view(), x.data(), n_tok, y.data(), n_rows, 0, packed->n_groups());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * packed->bytes()));
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * n_in * n_rows * n_tok * state.iterations(), benchmark::Counter::kIsRate);
}

// Cost of one parallel_for round trip (wake the workers, run an empty body, wait for all): the barrier a
// decode step pays once per matmul and attention call.
void BM_ThreadPoolBarrier(benchmark::State& state) {
  kestrel::ThreadPool pool(static_cast<int>(state.range(0)));
  size_t sink = 0;
  for (auto _ : state) {
    pool.parallel_for(64, 1, [&](size_t begin, size_t end, int) { benchmark::DoNotOptimize(sink += end - begin); });
  }
}
BENCHMARK(BM_ThreadPoolBarrier)->Arg(1)->Arg(2)->UseRealTime();

// One decoding token at the end of n_keys cached tokens whose pages are blocks 0, 1, 2, ... in order,
// with TinyLlama's attention geometry (32 query heads, 4 KV heads, head width 64). Not movable: rows()
// points into it.
struct DecodeToken {
  static constexpr int kKvHeads = 4, kHeadDim = 64, kHeads = 32;
  DecodeToken(int n_keys, int block_size)
      : table(static_cast<size_t>(n_keys / block_size)), q(static_cast<size_t>(kHeads) * kHeadDim, 0.01f),
        out(q.size()), pos(n_keys - 1) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    tables[0] = table.data();
  }
  DecodeToken(const DecodeToken&) = delete;
  kestrel::AttentionRows rows() const {
    return {std::span<const int32_t>(&pos, 1), std::span<const int32_t* const>(tables, 1)};
  }
  void attend(kestrel::ThreadPool& pool, const kestrel::KvLayerView& kv, int n_heads = kHeads) {
    kestrel::ops::attention_paged(pool, q.data(), kv, rows(), out.data(), 1, n_heads, 0.125f);
    benchmark::DoNotOptimize(out.data());
  }
  std::vector<int32_t> table;  // [n_blocks] block ids in order
  std::vector<float> q, out;   // [kHeads, kHeadDim]
  int32_t pos;
  const int32_t* tables[1];
};

// Decode attention of one token over range(0) cached tokens, pages of range(1) tokens, one thread, for
// each KV page type.
void BM_AttentionDecode(benchmark::State& state, kestrel::KvType type) {
  const int n_keys = static_cast<int>(state.range(0)), bs = static_cast<int>(state.range(1)), n_blocks = n_keys / bs;
  const int n_kv = DecodeToken::kKvHeads, hd = DecodeToken::kHeadDim;
  std::vector<uint8_t> k(static_cast<size_t>(n_blocks) * n_kv * bs * kestrel::kv_row_bytes(type, hd), 0x11), v(k.size(), 0x11);
  DecodeToken token(n_keys, bs);
  const kestrel::KvLayerView kv{k.data(), v.data(), type, true, bs, n_kv, hd, hd, hd, n_blocks};
  kestrel::ThreadPool pool(1);
  for (auto _ : state) token.attend(pool, kv);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * k.size()));
}
// The same decode attention with the KV streaming from memory, as in a real step, with 2 threads: layers of
// range(0) cached tokens (TinyLlama's KV heads), 22 * 4096 / range(0) of them (TinyLlama's 22 layers at
// 4096 tokens: 92 MB of F16 KV; 176 layers at 512), so no layer's pages are still in cache when it comes
// round again. Per iteration: one token's attention through every layer; `layer` is the time per layer.
// K and V may differ in type (q8_0_f16: llama.cpp's common -ctk q8_0 with F16 V).
void BM_AttentionDecodeLayers(benchmark::State& state, kestrel::KvTypes types) {
  const int n_keys = static_cast<int>(state.range(0)), n_layers = 22 * 4096 / n_keys, bs = 16, n_blocks = n_keys / bs;
  const int n_kv = DecodeToken::kKvHeads, hd = DecodeToken::kHeadDim;
  const size_t rows = static_cast<size_t>(n_blocks) * n_kv * bs;
  const size_t k_bytes = rows * kestrel::kv_row_bytes(types.k, hd), v_bytes = rows * kestrel::kv_row_bytes(types.v, hd);  // per layer
  const size_t layer_bytes = k_bytes + v_bytes;
  const std::shared_ptr<uint8_t[]> kv_bytes = kestrel::allocate_large_buffer(layer_bytes * n_layers);
  std::fill_n(kv_bytes.get(), layer_bytes * n_layers, uint8_t{0x11});
  DecodeToken token(n_keys, bs);
  kestrel::ThreadPool pool(2);
  for (auto _ : state)
    for (int l = 0; l < n_layers; ++l) {
      uint8_t* k = kv_bytes.get() + layer_bytes * static_cast<size_t>(l);
      token.attend(pool, kestrel::KvLayerView{k, k + k_bytes, types, true, bs, n_kv, hd, hd, hd, n_blocks});
    }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * layer_bytes * n_layers));
  state.counters["layer"] = benchmark::Counter(n_layers, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
// Decode attention with a single KV head (multi-query models: 8 query heads share it) over range(0) cached
// tokens, in cache, on range(1) threads: one (token, KV head) item, whose keys the page kernels split into
// parts for the threads to share (attention_key_parts); before the split, 2 threads took as long as 1.
void BM_AttentionDecodeOneKvHead(benchmark::State& state, kestrel::KvType type) {
  const int n_keys = static_cast<int>(state.range(0)), bs = 16, n_blocks = n_keys / bs, hd = DecodeToken::kHeadDim;
  std::vector<uint8_t> k(static_cast<size_t>(n_blocks) * bs * kestrel::kv_row_bytes(type, hd), 0x11), v(k.size(), 0x11);
  DecodeToken token(n_keys, bs);
  const kestrel::KvLayerView kv{k.data(), v.data(), type, true, bs, 1, hd, hd, hd, n_blocks};
  kestrel::ThreadPool pool(static_cast<int>(state.range(1)));
  for (auto _ : state) token.attend(pool, kv, 8);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * k.size()));
}
BENCHMARK_CAPTURE(BM_AttentionDecodeOneKvHead, f16, kestrel::KvType::F16)->Args({4096, 1})->Args({4096, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionDecodeOneKvHead, q8_0, kestrel::KvType::Q8_0)->Args({4096, 1})->Args({4096, 2})->UseRealTime();

BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, f16, kestrel::KvType::F16)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, bf16, kestrel::KvType::BF16)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, q8_0, kestrel::KvType::Q8_0)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, q8_0_f16, kestrel::KvTypes(kestrel::KvType::Q8_0, kestrel::KvType::F16))
    ->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, q4_0, kestrel::KvType::Q4_0)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, fp8, kestrel::KvType::FP8)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, tq4, kestrel::KvType::TQ4)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionDecodeLayers, tq3, kestrel::KvType::TQ3)->Arg(512)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_AttentionDecode, f32, kestrel::KvType::F32)->Args({512, 16})->Args({4096, 16});
BENCHMARK_CAPTURE(BM_AttentionDecode, f16, kestrel::KvType::F16)
    ->Args({512, 16})->Args({4096, 16})->Args({512, 8})->Args({512, 4})->Args({4096, 4});
BENCHMARK_CAPTURE(BM_AttentionDecode, bf16, kestrel::KvType::BF16)
    ->Args({512, 16})->Args({4096, 16})->Args({512, 4})->Args({4096, 4});
BENCHMARK_CAPTURE(BM_AttentionDecode, q8_0, kestrel::KvType::Q8_0)->Args({512, 16})->Args({4096, 16});
BENCHMARK_CAPTURE(BM_AttentionDecode, q4_0, kestrel::KvType::Q4_0)->Args({512, 16})->Args({4096, 16});
BENCHMARK_CAPTURE(BM_AttentionDecode, tq4, kestrel::KvType::TQ4)->Args({512, 16})->Args({4096, 16});
BENCHMARK_CAPTURE(BM_AttentionDecode, tq3, kestrel::KvType::TQ3)->Args({512, 16})->Args({4096, 16});

void register_all() {
  for (Isa isa : kestrel::runnable_isas()) {
    if (isa == Isa::Scalar) continue;
    for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                       DType::Q5_K, DType::Q6_K, DType::S24_Q8, DType::S24_Q4})
      for (size_t rows : {size_t{256}, size_t{2048}, size_t{32768}})
        for (int n_tok : {1, 2, 4, 8, 16, 32, 64, 512}) {
          if (n_tok == 512 && rows != 2048) continue;  // prefill: one matrix is enough
          if (rows == 256 && n_tok != 1) continue;     // decode's compute ceiling: 0.5 MB or less, in L2
          benchmark::RegisterBenchmark((std::string("packed_gemm/") + kestrel::dtype_name(type) + "/" +
                                        kestrel::isa_name(isa) + "/rows:" + std::to_string(rows) +
                                        "/tokens:" + std::to_string(n_tok)).c_str(),
                                       BM_PackedGemm, type, isa, n_tok, rows);
        }
  }
  for (Isa isa : kestrel::runnable_isas()) {
    if (isa == Isa::Scalar) continue;
    for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                       DType::Q5_K, DType::Q6_K, DType::S24_Q8, DType::S24_Q4})
      benchmark::RegisterBenchmark((std::string("packed_gemv_stream_2t/") + kestrel::dtype_name(type) + "/" +
                                    kestrel::isa_name(isa)).c_str(),
                                   BM_PackedGemvStream, type, isa)->UseRealTime();
  }
  for (Isa isa : kestrel::runnable_isas()) {
    if (isa == Isa::Scalar) continue;
    for (DType type : {DType::F16, DType::BF16, DType::S24_F16})
      for (int n_tok : {1, 8, 512})
        benchmark::RegisterBenchmark((std::string("packed_gemm_float/") + kestrel::dtype_name(type) + "/" +
                                      kestrel::isa_name(isa) + "/rows:2048/tokens:" + std::to_string(n_tok)).c_str(),
                                     BM_PackedGemmFloat, type, isa, n_tok, size_t{2048});
  }
  for (Isa isa : kestrel::runnable_isas())
    for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
      for (int n_tok : {1, 8})
        benchmark::RegisterBenchmark((std::string("matvec_q8_2048x2048/") + kestrel::dtype_name(type) + "/" +
                                      kestrel::isa_name(isa) + "/tokens:" + std::to_string(n_tok)).c_str(),
                                     BM_MatVecQ8, type, isa, n_tok);
  for (Isa isa : kestrel::runnable_isas())
    for (DType type : {DType::F32, DType::F16, DType::BF16})  // the block types: matvec_q8 and packed_gemm
      benchmark::RegisterBenchmark(
          (std::string("matvec_2048x2048/") + kestrel::dtype_name(type) + "/" + kestrel::isa_name(isa)).c_str(),
          BM_MatVec, type, isa);
  for (int threads : {1, 2})
    for (DType type : {DType::Q8_0, DType::S24_Q8, DType::Q4_0, DType::S24_Q4})
      benchmark::RegisterBenchmark(
          (std::string("BM_ModelDecodeGemms/") + kestrel::dtype_name(type) + "/threads:" + std::to_string(threads)).c_str(),
          BM_ModelDecodeGemms, type, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace

// Offline quantization's linear algebra (quant/cholesky.h, quant/gptq.h): a GPTQ pass over one matrix of
// n_in x n_in (the Cholesky factorisation, the triangular inverse and the column updates), 2 threads.
void BM_Gptq(benchmark::State& state) {
  const int64_t n = state.range(0), n_out = state.range(1);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0, 1);
  const int64_t n_tok = n + 64;
  std::vector<float> x(static_cast<size_t>(n_tok * n)), h(static_cast<size_t>(n * n), 0.0f), w(static_cast<size_t>(n_out * n));
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = dist(rng) * 0.05f;
  for (int64_t t = 0; t < n_tok; ++t)  // H = X^T X / n_tok (computed once, outside the timing)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) h[static_cast<size_t>(i * n + j)] += x[static_cast<size_t>(t * n + i)] * x[static_cast<size_t>(t * n + j)] / n_tok;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) h[static_cast<size_t>(j * n + i)] = h[static_cast<size_t>(i * n + j)];
  kestrel::ThreadPool pool(2);
  std::vector<uint8_t> out(kestrel::row_bytes(DType::Q4_0, static_cast<size_t>(n)) * static_cast<size_t>(n_out));
  for (auto _ : state) {
    const auto st = kestrel::gptq_quantize(DType::Q4_0, w.data(), n_out, n, h.data(), kestrel::GptqOptions{}, out.data(), pool);
    benchmark::DoNotOptimize(st.ok());
  }
}
BENCHMARK(BM_Gptq)->Args({512, 512})->Args({1024, 1024})->Args({2048, 256})->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

