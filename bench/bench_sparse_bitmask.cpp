// Can a format for unstructured sparsity beat dense decode on this CPU? (issue 15, docs/pruning.md)
//
// The candidate format, the leanest one that serves any pattern of zeros: per row, a 64-bit keep mask per
// 64 inputs, then the kept weights as int8 (popcount(mask) bytes per group), one scale per row. The masks
// come first so that finding the next group's values (p += popcount) waits on no load: with each mask
// just before its values the load -> popcount -> add chain took ~7 cycles per group, whatever the sparsity. Decode
// streams it and rebuilds each 64-input group of weights in a register: AVX-512 VBMI2 with one load and
// one expand (vpexpandb) per group; AVX2 with a byte shuffle per 8 inputs whose control comes from a 256-entry table
// indexed by the mask byte. Then the same int8 dot products as Q8_0 (vpdpbusd / maddubs).
//
// BM_BitmaskGemvStream runs one token through 65536 x 2048 such weights streaming from memory on 2
// threads, at 50%, 70% and 90% zeros, reporting the bytes it reads; the dense Q8_0 reference is
// kestrel_bench_kernels' packed_gemv_stream_2t/Q8_0 (the engine's kernel) over the same shape. The
// kernels here are a measurement, not an engine path: they skip what a real format needs (per-block
// scales, row offsets for threads to start at), which would only slow them.
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compute/cpu/isa.h"
#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr size_t kInputs = 2048, kRows = 65536, kGroups = kInputs / 64;

// Rows of [kGroups masks u64][kept int8 values, group after group], each row starting at offsets[row].
struct BitmaskMatrix {
  std::vector<uint8_t> bytes;
  std::vector<size_t> offsets;  // [kRows + 1]
  std::vector<int32_t> weight_sums;  // [kRows] sum of the row's int8 weights (for the unsigned activations)
};

BitmaskMatrix random_bitmask_matrix(double zeros, std::mt19937& rng) {
  BitmaskMatrix m;
  std::bernoulli_distribution keep(1.0 - zeros);
  std::uniform_int_distribution<int> value(-127, 127);
  const size_t distinct = 2048;  // rows repeat every `distinct`, like the dense stream benchmark's
  std::vector<uint8_t> first;
  std::vector<size_t> first_offsets{0};
  std::vector<int32_t> sums;
  for (size_t r = 0; r < distinct; ++r) {
    int32_t sum = 0;
    const size_t masks_at = first.size();
    first.resize(masks_at + 8 * kGroups);
    for (size_t g = 0; g < kGroups; ++g) {
      uint64_t mask = 0;
      for (int i = 0; i < 64; ++i) mask |= uint64_t{keep(rng)} << i;
      std::memcpy(first.data() + masks_at + 8 * g, &mask, 8);
      for (int i = 0; i < std::popcount(mask); ++i) {
        const auto v = static_cast<int8_t>(value(rng));
        first.push_back(static_cast<uint8_t>(v));
        sum += v;
      }
    }
    first_offsets.push_back(first.size());
    sums.push_back(sum);
  }
  for (size_t r = 0; r < kRows; r += distinct) {
    const size_t base = m.bytes.size();
    m.bytes.insert(m.bytes.end(), first.begin(), first.end());
    for (size_t i = 0; i < distinct; ++i) m.offsets.push_back(base + first_offsets[i]);
    m.weight_sums.insert(m.weight_sums.end(), sums.begin(), sums.end());
  }
  m.offsets.push_back(m.bytes.size());
  m.bytes.resize(m.bytes.size() + 64);  // the expand-loads and 8-byte loads may read past the last value
  return m;
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx512vnni,popcnt")))
void gemv_rows_vbmi2(const BitmaskMatrix& m, const uint8_t* x_unsigned, float* y, size_t begin, size_t end) {
  for (size_t r = begin; r < end; ++r) {
    const uint8_t* masks = m.bytes.data() + m.offsets[r];
    const uint8_t* p = masks + 8 * kGroups;
    __m512i acc = _mm512_setzero_si512();
    for (size_t g = 0; g < kGroups; ++g) {
      uint64_t mask;
      std::memcpy(&mask, masks + 8 * g, 8);
      // The register form: AMD runs the memory form of vpexpandb as microcode.
      const __m512i w = _mm512_maskz_expand_epi8(mask, _mm512_loadu_si512(p));
      p += _mm_popcnt_u64(mask);
      acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(x_unsigned + g * 64), w);
    }
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, acc);
    int32_t sum = 0;
    for (int32_t lane : lanes) sum += lane;
    y[r] = static_cast<float>(sum - 128 * m.weight_sums[r]);
  }
}

// Per mask byte: the shuffle control that puts kept value k at its input's place (0x80: zero), and popcount.
struct ExpandTable {
  alignas(16) uint64_t control[256];
  uint8_t count[256];
  ExpandTable() {
    for (int b = 0; b < 256; ++b) {
      uint8_t c[8];
      int k = 0;
      for (int i = 0; i < 8; ++i) c[i] = (b >> i) & 1 ? static_cast<uint8_t>(k++) : 0x80;
      std::memcpy(&control[b], c, 8);
      count[b] = static_cast<uint8_t>(k);
    }
  }
};
const ExpandTable kExpand;

__attribute__((target("avx2,fma,popcnt")))
void gemv_rows_avx2(const BitmaskMatrix& m, const int8_t* x_signed, float* y, size_t begin, size_t end) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t r = begin; r < end; ++r) {
    const uint8_t* masks = m.bytes.data() + m.offsets[r];
    const uint8_t* p = masks + 8 * kGroups;
    __m256i acc = _mm256_setzero_si256();
    for (size_t g = 0; g < kGroups; ++g) {
      uint64_t mask;
      std::memcpy(&mask, masks + 8 * g, 8);
      for (int half = 0; half < 2; ++half) {  // 32 inputs: four 8-input chunks
        __m128i chunk[4];
        for (int c = 0; c < 4; ++c) {
          const auto b = static_cast<uint8_t>(mask >> (8 * (4 * half + c)));
          chunk[c] = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kExpand.control[b])));
          p += kExpand.count[b];
        }
        const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(chunk[0], chunk[1])),
                                                  _mm_unpacklo_epi64(chunk[2], chunk[3]), 1);
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_signed + g * 64 + half * 32));
        // Q8_0's AVX2 product: |w| (unsigned) times x with w's sign.
        const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(products, ones));
      }
    }
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    const __m128i s2 = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    y[r] = static_cast<float>(_mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1))));
  }
}
#endif

// Row r's dot product by the definition (the kernels must agree).
float reference_row(const BitmaskMatrix& m, const int8_t* x, size_t r) {
  const uint8_t* masks = m.bytes.data() + m.offsets[r];
  const uint8_t* p = masks + 8 * kGroups;
  int64_t sum = 0;
  for (size_t g = 0; g < kGroups; ++g) {
    uint64_t mask;
    std::memcpy(&mask, masks + 8 * g, 8);
    for (int i = 0; i < 64; ++i)
      if ((mask >> i) & 1) sum += static_cast<int64_t>(static_cast<int8_t>(*p++)) * x[g * 64 + static_cast<size_t>(i)];
  }
  return static_cast<float>(sum);
}

void BM_BitmaskGemvStream(benchmark::State& state, kestrel::Isa isa, double zeros) {
#if defined(__x86_64__)
  std::mt19937 rng(3);
  const BitmaskMatrix m = random_bitmask_matrix(zeros, rng);
  std::vector<int8_t> x(kInputs);  // [kInputs] 8-bit activations
  std::vector<uint8_t> xu(kInputs);  // [kInputs] the same + 128 (vpdpbusd's unsigned side)
  std::uniform_int_distribution<int> code(-127, 127);
  for (size_t i = 0; i < kInputs; ++i) x[i] = static_cast<int8_t>(code(rng)), xu[i] = static_cast<uint8_t>(x[i] + 128);
  std::vector<float> y(kRows);  // [kRows]
  const auto run = [&](size_t begin, size_t end) {
    if (isa == kestrel::Isa::Avx512) gemv_rows_vbmi2(m, xu.data(), y.data(), begin, end);
    else gemv_rows_avx2(m, x.data(), y.data(), begin, end);
  };
  run(0, 64);
  for (size_t r = 0; r < 64; ++r)
    if (y[r] != reference_row(m, x.data(), r)) {
      state.SkipWithError("the kernel disagrees with the reference");
      return;
    }
  kestrel::ThreadPool pool(2);
  for (auto _ : state) {
    pool.parallel_for_dynamic(kRows, 1024, [&](size_t begin, size_t end, int) { run(begin, end); });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * m.offsets.back()));
  state.counters["bytes_per_64"] = static_cast<double>(m.offsets.back()) / static_cast<double>(kRows * kGroups);
#else
  state.SkipWithError("x86 only");
  (void)isa, (void)zeros;
#endif
}

[[maybe_unused]] const bool kRegistered = [] {
  for (kestrel::Isa isa : kestrel::runnable_isas()) {
    if (isa != kestrel::Isa::Avx2 && isa != kestrel::Isa::Avx512) continue;
#if defined(__x86_64__)
    if (isa == kestrel::Isa::Avx512 && !__builtin_cpu_supports("avx512vbmi2")) continue;
#endif
    for (double zeros : {0.5, 0.7, 0.9})
      benchmark::RegisterBenchmark((std::string("bitmask_gemv_stream_2t/") + kestrel::isa_name(isa) + "/zeros:" +
                                    std::to_string(static_cast<int>(zeros * 100))).c_str(),
                                   BM_BitmaskGemvStream, isa, zeros)
          ->UseRealTime();
  }
  return true;
}();

}  // namespace
