// Every fast kernel against its scalar reference, on seeded random inputs, on every ISA level this CPU
// runs; and the reference quantizers against the formats' error bounds.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "compute/cpu/attention.h"
#include "compute/cpu/dot.h"
#include "compute/cpu/elementwise.h"
#include "compute/cpu/packed_matrix.h"
#include "compute/cpu/packed_sparse24.h"
#include "compute/cpu/q8_activations.h"
#include "compute/cpu/task_grain.h"
#include "compute/ref/ref_ops.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "attention_test_support.h"
#include "block_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::FP8_E4M3,
                        DType::S24_F16, DType::S24_Q8, DType::S24_Q4};
using test::kBlockTypes;
using test::quantized;

using test::gaussian_vector;
bool plain_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Every slot of kv's pages (k_dim == v_dim) set to N(0, 1) values: K from seed_k, V from seed_v, in (block,
// head, offset, dim) order, encoded as the pages' types.
void fill_pages(const KvLayerView& kv, uint32_t seed_k, uint32_t seed_v) {
  const size_t n = static_cast<size_t>(kv.n_blocks) * kv.n_kv_heads * kv.block_size * kv.k_dim;
  const auto kvals = gaussian_vector(n, seed_k), vvals = gaussian_vector(n, seed_v);
  for (int32_t blk = 0; blk < kv.n_blocks; ++blk)
    for (int h = 0; h < kv.n_kv_heads; ++h)
      for (int o = 0; o < kv.block_size; ++o) {
        const size_t i = ((static_cast<size_t>(blk) * kv.n_kv_heads + h) * kv.block_size + o) * kv.k_dim;
        kv.write_k(blk, h, o, kvals.data() + i);
        kv.write_v(blk, h, o, vvals.data() + i);
      }
}

TEST(Kernels, DotMatchesReferenceOnEveryIsa) {
  for (Isa isa : runnable_isas()) {
    for (DType type : kTypes) {
      for (size_t n : {256u, 512u, 2048u, 5632u}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(type) + " n=" + std::to_string(n));
        const auto w = gaussian_vector(n, 1 + static_cast<uint32_t>(n), 0.05f);
        const auto x = gaussian_vector(n, 7);
        const auto bytes = quantized(type, w, n);
        const double want = ref::dot(type, bytes.data(), x.data(), n);
        const float got = dot_kernel(type, isa)(bytes.data(), x.data(), n);
        // Float accumulation order differs: allow a relative error of the sum of |terms|.
        std::vector<float> decoded(n);
        dequantize_row(type, bytes.data(), decoded.data(), n);
        double magnitude = 0;
        for (size_t i = 0; i < n; ++i) magnitude += std::fabs(decoded[i] * x[i]);
        EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-6);
      }
    }
  }
}

TEST(Kernels, F32DotHandlesOddLengths) {
  for (Isa isa : runnable_isas())
    for (size_t n : {1u, 7u, 15u, 17u, 33u, 100u}) {
      const auto w = gaussian_vector(n, 3), x = gaussian_vector(n, 4);
      const double want = ref::dot(DType::F32, w.data(), x.data(), n);
      EXPECT_NEAR(dot_kernel(DType::F32, isa)(w.data(), x.data(), n), want, 1e-4) << isa_name(isa) << " n=" << n;
    }
}

// The scalar level's dot of encoded rows (decode) gives the same bits as its F32 dot of the decoded rows
// (matmul's prefill tiles): prefill then equals stepwise decode exactly, as on the vector levels.
TEST(Kernels, ScalarDotOfEncodedRowsEqualsDotOfDecodedRows) {
  for (DType type : kTypes)
    for (size_t n : {256u, 2304u, 2053u}) {
      if (n % dtype_traits(type).block_elems) continue;  // the odd length: float types only
      const auto w = gaussian_vector(n, 11, 0.05f), x = gaussian_vector(n, 12);
      const auto bytes = quantized(type, w, n);
      std::vector<float> decoded(n);
      dequantize_row(type, bytes.data(), decoded.data(), n);
      EXPECT_EQ(dot_kernel_scalar(type)(bytes.data(), x.data(), n), dot_kernel_scalar(DType::F32)(decoded.data(), x.data(), n))
          << dtype_name(type) << " n=" << n;
    }
}

TEST(Kernels, IntegerDotMatchesReferenceOnEveryIsa) {
  const size_t n = 2048, nb = n / 32;
  for (Isa isa : runnable_isas()) {
    for (DType type : kBlockTypes) {
      const DotQ8Fn fast = dot_q8_kernel(type, isa), slow = dot_q8_kernel_scalar(type);
      ASSERT_NE(fast, nullptr);
      const auto bytes = quantized(type, gaussian_vector(n, 41, 0.05f), n);
      for (int n_tok = 1; n_tok <= kDotQ8MaxTokens; ++n_tok) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(type) + " n_tok=" + std::to_string(n_tok));
        std::vector<BlockQ8A> xq(static_cast<size_t>(n_tok) * nb);
        for (int t = 0; t < n_tok; ++t) {
          const auto x = gaussian_vector(n, 50 + static_cast<uint32_t>(t), t == 2 ? 30.0f : 1.0f);
          quantize_activations_q8a(x.data(), xq.data() + t * nb, n);
        }
        std::vector<float> got(static_cast<size_t>(n_tok) * 3, -1.f), want(got.size(), -1.f);
        fast(bytes.data(), xq.data(), nb, n_tok, n, got.data(), 3);  // output stride 3: others untouched
        slow(bytes.data(), xq.data(), nb, n_tok, n, want.data(), 3);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-4 * (1 + std::fabs(want[i]))) << i;
      }
    }
  }
}

// The packed kernels ISA level `isa` runs for m on this CPU: its layout's (for the 2:4 integer layouts on
// AVX-512, the VBMI kernel where the CPU has VBMI), and on such CPUs the 2:4 kernel for AVX-512 without
// VBMI too.
struct KernelUnderTest {
  PackedLayout layout;
  PackedGemmFn kernel;
  std::string name;
};
std::vector<KernelUnderTest> kernels_run_by(const WeightMatrix& m, Isa isa) {
  const auto packed = PackedMatrix::pack(m, isa);
  if (!packed) return {};
  std::vector<KernelUnderTest> out{{packed->layout, packed_gemm_kernel(packed->layout, isa), isa_name(isa)}};
  if (isa == Isa::Avx512 && cpu_has_avx512_vbmi() && packed_gemm_kernel_avx512vbmi(packed->layout))
    out.push_back({packed->layout, packed_gemm_kernel_avx512(packed->layout), "avx512 without vbmi"});
  return out;
}

// Token t's activations of n_in inputs.
using ActivationsOf = std::function<std::vector<float>(size_t n_in, int t)>;
std::vector<float> gaussian_activations(size_t n_in, int t) { return gaussian_vector(n_in, 80 + static_cast<uint32_t>(t)); }

// Layout `layout` of m against the references, run by `kernel`.
void check_packed_gemm(const WeightMatrix& m, const KernelUnderTest& under_test, const ActivationsOf& activations = gaussian_activations) {
  const PackedLayout layout = under_test.layout;
  const PackedGemmFn kernel = under_test.kernel;
  const size_t n_in = static_cast<size_t>(m.n_in), n_out = static_cast<size_t>(m.n_out), nb = n_in / 32;
  const auto packed = PackedMatrix::pack(m, layout);
  ASSERT_TRUE(packed.has_value());
  for (int n_tok : {1, 3, 8, 13, 29}) {
    SCOPED_TRACE(under_test.name + " " + dtype_name(m.type) + " layout " + std::to_string(static_cast<int>(layout)) +
                 " n_tok=" + std::to_string(n_tok));
    std::vector<BlockQ8A> xq(static_cast<size_t>(n_tok) * nb);
    for (int t = 0; t < n_tok; ++t)
      quantize_activations_q8a(activations(n_in, t).data(), xq.data() + t * nb, n_in);
    // The reference over the packed bytes must agree with the row-dot reference over the file's bytes...
    std::vector<float> want(n_out * n_tok), rows(n_out * n_tok);
    packed_gemm_reference(layout)(packed->view(), xq.data(), n_tok, want.data(), n_out, 0, packed->n_groups());
    for (size_t r = 0; r < n_out; ++r)
      dot_q8_kernel_scalar(m.type)(m.row(static_cast<int64_t>(r)), xq.data(), nb, n_tok, n_in, rows.data() + r, n_out);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], rows[i], 1e-4 * (1 + std::fabs(rows[i]))) << i;
    // ...and the ISA's kernel with the reference, on a sub-range of row groups.
    std::vector<float> got(want.size(), -7.f);
    kernel(packed->view(), xq.data(), n_tok, got.data(), n_out, 1, 3);
    for (int t = 0; t < n_tok; ++t)
      for (size_t r = 0; r < n_out; ++r) {
        const size_t i = t * n_out + r;
        if (r < 16) EXPECT_EQ(got[i], -7.f) << "group 0 was not asked for";
        else EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
      }
    // Where the thread streams next (prefetched on into) changes nothing in the results.
    PackedView streaming_on = packed->view();
    streaming_on.next = packed->block(0, 0);
    std::vector<float> again(want.size(), -7.f);
    kernel(streaming_on, xq.data(), n_tok, again.data(), n_out, 1, 2);
    kernel(streaming_on, xq.data(), n_tok, again.data(), n_out, 2, 3);
    EXPECT_EQ(again, got);
    // Accumulating stores add to what y holds.
    PackedView adding = packed->view();
    adding.accumulate = true;
    kernel(adding, xq.data(), n_tok, again.data(), n_out, 1, 3);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(again[i], i % n_out < 16 ? -7.f : got[i] + got[i]) << i;
  }
}

TEST(Kernels, PackedGemmMatchesReferenceOnEveryIsa) {
  const size_t n_in = 512, n_out = 48;
  for (DType type : kBlockTypes) {
    const auto bytes = quantized(type, gaussian_vector(n_in * n_out, 70, 0.05f), n_in);
    const WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
    for (Isa isa : runnable_isas()) {
      if (!PackedMatrix::supports(type, n_in, n_out, isa)) continue;
      for (const KernelUnderTest& k : kernels_run_by(m, isa)) check_packed_gemm(m, k);
    }
  }
}

// The kernels' integer partial sums at their largest: every weight s (+-1) but one in 16 at -8/7 s, so the
// symmetric formats map that one to their most negative code and the others to their top code, and the
// formats with a minimum map s to their top code (s = 1) or bottom one (s = -1); every activation of a token
// +-1 (all its codes +-127). An int16 sum that overflows, or a product that saturates, shows as a wrong result.
TEST(Kernels, PackedGemmHoldsAtTheCodesExtremes) {
  const size_t n_in = 512, n_out = 48;
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> w(n_in * n_out);
    for (size_t i = 0; i < w.size(); ++i) w[i] = i % 16 == 5 ? -sign * 8.0f / 7.0f : sign;
    const ActivationsOf plus_minus_one = [](size_t n, int t) { return std::vector<float>(n, t % 2 ? -1.0f : 1.0f); };
    for (DType type : kBlockTypes) {
      SCOPED_TRACE(std::string(dtype_name(type)) + (sign > 0 ? " positive" : " negative") + " weights");
      const auto bytes = quantized(type, w, n_in);
      const WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
      for (Isa isa : runnable_isas()) {
        if (!PackedMatrix::supports(type, n_in, n_out, isa)) continue;
        for (const KernelUnderTest& k : kernels_run_by(m, isa)) check_packed_gemm(m, k, plus_minus_one);
      }
    }
  }
}

// AVX-512 runs the 2:4 integer layouts on their VBMI kernels exactly where the CPU has VBMI.
TEST(Kernels, Sparse24VbmiKernelsWhereTheCpuHasVbmi) {
  for (PackedLayout layout : {PackedLayout::S24_Q8x16, PackedLayout::S24_Q4x16}) {
    const PackedGemmFn vbmi = packed_gemm_kernel_avx512vbmi(layout), chosen = packed_gemm_kernel(layout, Isa::Avx512);
    if (!cpu_has_avx512_vbmi()) {
      EXPECT_NE(chosen, vbmi);
      continue;
    }
    ASSERT_NE(vbmi, nullptr) << "an x86 build has the VBMI kernels";
    EXPECT_EQ(chosen, vbmi);
    EXPECT_NE(packed_gemm_kernel_avx512(layout), vbmi);
  }
  EXPECT_EQ(packed_gemm_kernel_avx512vbmi(PackedLayout::Q8_0x16), nullptr);
}

TEST(Kernels, PackedBf16GemmMatchesReference) {
  const size_t n_in = 256, n_out = 48;
  for (DType type : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(type));
    const auto bytes = quantized(type, gaussian_vector(n_in * n_out, 90, 0.05f), n_in);
    const WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
    const auto packed = PackedMatrix::pack(m, Isa::Avx512);
    ASSERT_TRUE(packed.has_value());
    if (!cpu_has_avx512_bf16()) {
      ASSERT_NE(packed->layout, PackedLayout::BF16x16);
    }
    if (packed->layout != PackedLayout::BF16x16) continue;  // the CPU lacks AVX-512 BF16: the Fma16 layouts
    for (int n_tok : {1, 5, 9}) {
      const auto x = gaussian_vector(n_in * n_tok, 91);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = fp32_to_bf16(x[i]);
      std::vector<float> want(n_out * n_tok), got(want.size());
      packed_gemm_bf16_reference(packed->view(), xb.data(), n_tok, want.data(), n_out, 0, packed->n_groups());
      // The reference over packed bytes agrees with the file's weights (F16 rounded to BF16).
      std::vector<float> w(n_in);
      for (size_t r = 0; r < n_out; ++r) {
        dequantize_row(type, m.row(static_cast<int64_t>(r)), w.data(), n_in);
        double s = 0, mag = 0;
        for (size_t i = 0; i < n_in; ++i) {
          s += w[i] * bf16_to_fp32(xb[i]);
          mag += std::fabs(w[i] * x[i]);
        }
        EXPECT_NEAR(want[r], s, 4e-3 * mag) << r;
      }
      if (!PackedMatrix::supports(type, n_in, n_out, detected_isa())) continue;
      packed_gemm_bf16_kernel(detected_isa())(packed->view(), xb.data(), n_tok, got.data(), n_out, 0, packed->n_groups());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
    }
  }
}

// The F16/BF16 weights widened in registers, and F32 weights (the Fma16 layouts): exact weights, float
// activations, in decode tiles (one token, whole rows) and prefill tiles (input chunks added up in y).
// The 2:4 F16 layout too: its sparse decode tiles (up to 4 tokens), the dense prefill of expanded groups
// and AVX2's tokens-in-lanes prefill (from 48 tokens).
TEST(Kernels, PackedFloatGemmMatchesReferenceOnEveryIsa) {
  const size_t n_in = 1024, n_out = 48;
  for (DType type : {DType::F16, DType::BF16, DType::F32, DType::S24_F16}) {
    const auto bytes = quantized(type, gaussian_vector(n_in * n_out, 92, 0.05f), n_in);
    const WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
    const auto packed = PackedMatrix::pack(m, Isa::Avx2);
    ASSERT_TRUE(packed.has_value());
    ASSERT_EQ(packed->layout, type == DType::F16    ? PackedLayout::F16Fma16
                              : type == DType::BF16 ? PackedLayout::BF16Fma16
                              : type == DType::F32  ? PackedLayout::F32Fma16
                                                    : PackedLayout::S24_F16x16);
    const PackedGemmF32Fn reference = packed_gemm_f32_reference(packed->layout);
    // 100: more than one token block of the prefill loop; from 48 the 2:4 F16 lane tiles (AVX2), with the
    // tokens of a last tile of 12 or 4 by the other kernels, of 42 in lanes
    for (int n_tok : {1, 2, 3, 4, 6, 7, 13, 40, 48, 60, 90, 100}) {
      const auto x = gaussian_vector(n_in * static_cast<size_t>(n_tok), 93 + static_cast<uint32_t>(n_tok));
      std::vector<float> want(n_out * n_tok);
      reference(packed->view(), x.data(), n_tok, want.data(), n_out, 0, packed->n_groups());
      // The reference over packed bytes is the file's weights exactly.
      std::vector<float> w(n_in);
      for (int t = 0; t < n_tok; ++t)
        for (size_t r = 0; r < n_out; ++r) {
          dequantize_row(type, m.row(static_cast<int64_t>(r)), w.data(), n_in);
          double s = 0;
          for (size_t i = 0; i < n_in; ++i) s += static_cast<double>(w[i]) * x[t * n_in + i];
          ASSERT_NEAR(want[t * n_out + r], s, 1e-5 * (1 + std::fabs(s))) << r;
        }
      for (Isa isa : runnable_isas()) {
        if (!PackedMatrix::supports(type, n_in, n_out, isa)) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(type) + " n_tok=" + std::to_string(n_tok));
        const PackedGemmF32Fn fast = packed_gemm_f32_kernel(packed->layout, isa);
        std::vector<float> got(want.size(), -7.f);
        fast(packed->view(), x.data(), n_tok, got.data(), n_out, 1, 3);
        for (size_t i = 0; i < got.size(); ++i) {
          if (i % n_out < 16) EXPECT_EQ(got[i], -7.f) << "group 0 was not asked for";
          else EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
        }
        PackedView adding = packed->view(packed->block(0, 0), true);
        std::vector<float> again = got;
        fast(adding, x.data(), n_tok, again.data(), n_out, 1, 3);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(again[i], i % n_out < 16 ? -7.f : 2 * got[i], 1e-5 * (1 + std::fabs(got[i]))) << i;
      }
    }
  }
}

TEST(Kernels, RmsnormMatchesReference) {
  ThreadPool pool(2);
  for (int n : {64, 2048, 5632}) {
    const auto x = gaussian_vector(3 * static_cast<size_t>(n), 94, 2.0f), weight = gaussian_vector(static_cast<size_t>(n), 95);
    std::vector<float> got(x.size()), want(x.size());
    ops::rmsnorm(pool, x.data(), weight.data(), got.data(), 3, n, 1e-5f);
    ref::rmsnorm(x.data(), weight.data(), want.data(), 3, n, 1e-5f);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << n << " " << i;
  }
}

// The angle table (float angles from float inverse frequencies) against angles computed in double: at
// position 4000 an angle of ~4000 rad carries ~2.4e-4 of float rounding, so the tolerance grows with it.
TEST(Kernels, RopeMatchesReference) {
  const int n_heads = 3, hd = 64;
  const std::vector<int32_t> positions = {0, 1, 17, 255, 4000};
  const std::vector<float> factors(hd / 2, 1.5f);
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::NeoX})
    for (int n_rot : {64, 32})
      for (const float* ff : {static_cast<const float*>(nullptr), factors.data()}) {
        const auto x = gaussian_vector(positions.size() * n_heads * hd, 96);
        std::vector<float> got = x, want = x;
        ops::rope(got.data(), ops::rope_table(positions, n_rot, 10000.0f, ff), n_heads, hd, style);
        ref::rope(want.data(), positions, n_heads, hd, n_rot, 10000.0f, style, ff);
        for (size_t i = 0; i < got.size(); ++i) {
          const int pos = positions[i / (n_heads * hd)];
          ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-6f * pos) << i;
          if (static_cast<int>(i % hd) >= n_rot) {
            ASSERT_EQ(got[i], x[i]) << "dims past n_rot stay";
          }
        }
      }
}

TEST(Kernels, ActivationQuantizationRoundTrips) {
  const auto x = gaussian_vector(256, 60, 3.0f);
  std::vector<BlockQ8A> q(8);
  quantize_activations_q8a(x.data(), q.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const BlockQ8A& b = q[i / 32];
    EXPECT_NEAR(b.d * b.qs[i % 32], x[i], b.d * 0.5f + 1e-7f) << i;
  }
  for (const BlockQ8A& b : q) {
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 16; ++i) s0 += b.qs[i], s1 += b.qs[16 + i];
    EXPECT_EQ(b.sum16[0], s0);
    EXPECT_EQ(b.sum16[1], s1);
  }
}

// Each ISA's quantizer gives the reference's blocks bit for bit, including halfway cases (ties to even),
// zero blocks and blocks whose largest magnitude is negative.
TEST(Kernels, ActivationQuantizationKernelsMatchReference) {
  auto x = gaussian_vector(32 * 12, 61, 2.0f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;                       // an all-zero block
  for (int i = 0; i < 32; ++i) x[32 + i] = i == 0 ? 127.0f : (i - 16) + 0.5f;  // scale 1: exact ties
  for (int i = 0; i < 32; ++i) x[64 + i] = i == 5 ? -12.7f : 0.05f * i;
  std::vector<BlockQ8A> want(x.size() / 32);
  quantize_activations_q8a(x.data(), want.data(), x.size());
  for (Isa isa : runnable_isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<BlockQ8A> got(want.size());
    quantize_q8a_kernel(isa)(x.data(), got.data(), x.size());
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_EQ(got[b].d, want[b].d) << b;
      EXPECT_EQ(got[b].sum16[0], want[b].sum16[0]) << b;
      EXPECT_EQ(got[b].sum16[1], want[b].sum16[1]) << b;
      for (int i = 0; i < 32; ++i) ASSERT_EQ(got[b].qs[i], want[b].qs[i]) << b << " " << i;
    }
  }
}

// RMSNorm folded into quantization, on every ISA, bit for bit against RMSNorm then quantization: rows of
// several widths and magnitudes, and an all-zero row (its blocks quantize to zeros).
TEST(Kernels, NormalisingQuantizerMatchesRmsnormThenQuantize) {
  for (size_t n : {size_t{32}, size_t{256}, size_t{2048}, size_t{5632}}) {
    for (float magnitude : {0.0f, 1e-3f, 1.0f, 300.0f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " magnitude " + std::to_string(magnitude));
      const auto x = gaussian_vector(n, 62, magnitude), weight = gaussian_vector(n, 63, 0.5f);
      std::vector<float> normed(n);
      ops::rmsnorm(x.data(), weight.data(), normed.data(), 1, static_cast<int>(n), 1e-6f);
      std::vector<BlockQ8A> want(n / 32);
      quantize_activations_q8a(normed.data(), want.data(), n);
      for (Isa isa : runnable_isas()) {
        SCOPED_TRACE(isa_name(isa));
        std::vector<BlockQ8A> got(want.size());
        quantize_norm_q8a_kernel(isa)(x.data(), weight.data(), 1e-6f, got.data(), n);
        for (size_t b = 0; b < want.size(); ++b) {
          ASSERT_EQ(got[b].d, want[b].d) << b;
          ASSERT_EQ(got[b].sum(), want[b].sum()) << b;
          ASSERT_TRUE(std::equal(got[b].qs, got[b].qs + 32, want[b].qs)) << b;
        }
      }
    }
  }
}

// SwiGLU's activation on every ISA against the scalar reference, across magnitudes (both signs, large |x|)
// and lengths that end mid-vector.
TEST(Kernels, SiluMulMatchesReference) {
  for (size_t n : {1u, 15u, 16u, 33u, 1000u}) {
    auto gate = gaussian_vector(n, 70, 4.0f), up = gaussian_vector(n, 71);
    if (n > 4) gate[0] = 95.0f, gate[1] = -95.0f, gate[2] = 0.0f, gate[3] = -1e-8f;
    std::vector<float> want = gate;
    silu_mul_reference(want.data(), up.data(), n);
    for (Isa isa : runnable_isas()) {
      std::vector<float> got = gate;
      silu_mul_kernel(isa)(got.data(), up.data(), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << isa_name(isa) << " n=" << n << " i=" << i;
    }
  }
}

// Accumulate::Yes adds the product to y, bit for bit as matmul then add, on every matmul path: packed
// integer and BF16 GEMMs (in their stores, on every ISA's kernel), row dots and float tiles (through a
// scratch).
TEST(Kernels, MatmulAccumulateAddsTheProduct) {
  ThreadPool pool(2);
  for (const auto& [n_in, n_out] : std::vector<std::pair<size_t, size_t>>{{256, 48}, {172, 37}})
  for (DType type : kTypes) {
    if (n_in % 32 != 0 && !plain_float(type)) continue;  // padded shapes: float weights only
    const auto bytes = quantized(type, gaussian_vector(n_in * n_out, 64, 0.05f), n_in);
    WeightMatrix w{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
    const auto packed = PackedMatrix::pack(w);
    for (bool use_packed : {false, true}) {
      if (use_packed && !packed) continue;
      w.packed = use_packed ? &*packed : nullptr;
      for (int n_tok : {1, 5, 12}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + (use_packed ? " packed" : "") + " n_in=" + std::to_string(n_in) +
                     " n_tok=" + std::to_string(n_tok));
        const auto x = gaussian_vector(n_in * n_tok, 65), before = gaussian_vector(n_out * n_tok, 66);
        std::vector<float> product(before.size()), want = before, got = before;
        ops::matmul(pool, w, x.data(), product.data(), n_tok);
        ops::add(want.data(), product.data(), want.size());
        ops::matmul(pool, w, x.data(), got.data(), n_tok, ops::Accumulate::Yes);
        EXPECT_EQ(got, want);
      }
    }
  }
}

TEST(Kernels, MatmulMatchesReference) {
  // Float weights are dotted with float activations; quantized weights with 8-bit activation blocks, so
  // their tolerance is a fraction of the sum of |terms| (the activation rounding; for weights packed as
  // BF16, the activations' rounding to BF16). Row dots and packed GEMMs; 70 rows are not whole 16-row
  // groups, and float weights also run 172 inputs (stories260K's FFN width): packed, with zero padding.
  ThreadPool pool(2);
  for (DType type : kTypes) {
    for (const size_t n_in : {512, 172}) {
      if (n_in % 32 != 0 && !plain_float(type)) continue;  // other types: whole blocks only
      const size_t n_out = 70;
      const auto bytes = quantized(type, gaussian_vector(n_in * n_out, 11, 0.05f), n_in);
      WeightMatrix m{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes.data(), row_bytes(type, n_in)};
      const auto packed = PackedMatrix::pack(m);
      if (plain_float(type)) {
        ASSERT_TRUE(packed.has_value());
      }
      for (bool use_packed : {false, true}) {
        if (use_packed && !packed) continue;
        m.packed = use_packed ? &*packed : nullptr;
        const bool int8 = dot_q8_kernel(type) != nullptr || (use_packed && packed->layout == PackedLayout::BF16x16);
        for (int n_tok : {1, 3, 9, 33}) {
          SCOPED_TRACE(std::string(dtype_name(type)) + (use_packed ? " packed" : "") + " n_in=" + std::to_string(n_in) +
                       " n_tok=" + std::to_string(n_tok));
          const auto x = gaussian_vector(n_in * n_tok, 12);
          std::vector<float> got(n_out * n_tok), want(n_out * n_tok);
          ops::matmul(pool, m, x.data(), got.data(), n_tok);
          ref::matmul(m, x.data(), want.data(), n_tok);
          std::vector<float> decoded(n_in);
          for (int t = 0; t < n_tok; ++t)
            for (size_t r = 0; r < n_out; ++r) {
              dequantize_row(type, bytes.data() + r * row_bytes(type, n_in), decoded.data(), n_in);
              double magnitude = 0;
              for (size_t i = 0; i < n_in; ++i) magnitude += std::fabs(decoded[i] * x[t * n_in + i]);
              EXPECT_NEAR(got[t * n_out + r], want[t * n_out + r], int8 ? 0.01 * magnitude : 2e-4) << r;
            }
        }
      }
    }
  }
}

// The fused SwiGLU pass equals the two projections followed by the activation: with packed gate and up
// (also of different types, as Q4_K_M mixes them), over many row groups so both threads take several
// chunks, for token counts on both sides of in-pass quantization; and unpacked weights (the fallback).
TEST(Kernels, MatmulSwigluMatchesProjectionsThenActivation) {
  ThreadPool pool(2);
  const size_t n_in = 256, n_ff = 160;
  struct Pair { DType gate, up; bool packed; };  // unpacked: the row-dot path
  const Pair pairs[] = {{DType::Q4_0, DType::Q4_0, true}, {DType::Q4_K, DType::Q6_K, true}, {DType::Q8_0, DType::Q8_0, true},
                        {DType::F32, DType::F32, true}, {DType::F32, DType::F32, false}};
  for (const auto& [gate_type, up_type, use_packed] : pairs) {
    const auto gate_bytes = quantized(gate_type, gaussian_vector(n_in * n_ff, 90, 0.05f), n_in);
    const auto up_bytes = quantized(up_type, gaussian_vector(n_in * n_ff, 91, 0.05f), n_in);
    WeightMatrix gate{gate_type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_ff), gate_bytes.data(),
                      row_bytes(gate_type, n_in)};
    WeightMatrix up{up_type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_ff), up_bytes.data(),
                    row_bytes(up_type, n_in)};
    const auto gate_packed = PackedMatrix::pack(gate), up_packed = PackedMatrix::pack(up);
    ASSERT_TRUE(gate_packed.has_value() && up_packed.has_value());
    if (use_packed) gate.packed = &*gate_packed, up.packed = &*up_packed;
    for (int n_tok : {1, 5, 11}) {
      SCOPED_TRACE(std::string(dtype_name(gate_type)) + "/" + dtype_name(up_type) + " n_tok=" + std::to_string(n_tok));
      const auto x = gaussian_vector(n_in * n_tok, 92);
      std::vector<float> want(n_ff * n_tok), want_up(n_ff * n_tok), got(n_ff * n_tok, -7.f), got_up(n_ff * n_tok);
      ops::matmul(pool, gate, x.data(), want.data(), n_tok);
      ops::matmul(pool, up, x.data(), want_up.data(), n_tok);
      silu_mul_reference(want.data(), want_up.data(), want.size());
      ops::matmul_swiglu(pool, gate, up, ops::MatmulInput{x.data()}, got.data(), got_up.data(), n_tok);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << i;
    }
  }
}

// A normalised input (MatmulInput with a norm weight) gives exactly RMSNorm then the plain projection: the
// packed passes fold the norm into quantizing the input (in the pass for a few tokens, up front for many),
// the other paths normalise into a buffer first.
TEST(Kernels, NormalisedMatmulInputEqualsRmsnormThenMatmul) {
  ThreadPool pool(2);
  const size_t n_in = 256, n_out = 64;
  const auto norm_weight = gaussian_vector(n_in, 93);
  for (DType type : {DType::Q4_K, DType::Q8_0, DType::F16, DType::F32}) {
    const auto bytes_a = quantized(type, gaussian_vector(n_in * n_out, 94, 0.05f), n_in);
    const auto bytes_b = quantized(type, gaussian_vector(n_in * n_out, 95, 0.05f), n_in);
    WeightMatrix a{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes_a.data(), row_bytes(type, n_in)};
    WeightMatrix b{type, static_cast<int64_t>(n_in), static_cast<int64_t>(n_out), bytes_b.data(), row_bytes(type, n_in)};
    const auto packed_a = PackedMatrix::pack(a), packed_b = PackedMatrix::pack(b);
    if (packed_a) a.packed = &*packed_a, b.packed = &*packed_b;
    for (int n_tok : {1, 3, 12}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " n_tok=" + std::to_string(n_tok));
      const auto x = gaussian_vector(n_in * n_tok, 96, 3.0f);
      std::vector<float> h(x.size());
      ops::rmsnorm(x.data(), norm_weight.data(), h.data(), n_tok, static_cast<int>(n_in), 1e-5f);
      const ops::MatmulInput normed{x.data(), norm_weight.data(), 1e-5f};
      std::vector<float> want_a(n_out * n_tok), want_b(want_a.size()), got_a(want_a.size()), got_b(want_a.size());
      ops::matmul(pool, a, h.data(), want_a.data(), n_tok);
      ops::matmul(pool, b, h.data(), want_b.data(), n_tok);
      const WeightMatrix ws[] = {a, b};
      float* const ys[] = {got_a.data(), got_b.data()};
      ops::matmul_many(pool, ws, normed, ys, n_tok);
      EXPECT_EQ(got_a, want_a);
      EXPECT_EQ(got_b, want_b);
      ops::matmul_swiglu(pool, a, b, normed, got_a.data(), got_b.data(), n_tok);
      silu_mul_reference(want_a.data(), want_b.data(), want_a.size());
      for (size_t i = 0; i < want_a.size(); ++i) ASSERT_NEAR(got_a[i], want_a[i], 2e-6f * (1 + std::fabs(want_a[i]))) << i;
    }
  }
}

// RoPE applied while K is written into the cache equals rotating K first and storing it (both styles).
TEST(Kernels, KvStoreWithRopeEqualsRopeThenStore) {
  const int n_kv = 2, hd = 32, bs = 16, n_blocks = 2, n_tok = 3;
  const std::vector<int32_t> positions = {0, 7, 20};
  const std::vector<int32_t> table = {1, 0};
  const int32_t* tables[n_tok] = {table.data(), table.data(), table.data()};
  const AttentionRows rows{positions, tables};
  const auto k = gaussian_vector(static_cast<size_t>(n_tok) * n_kv * hd, 97), v = gaussian_vector(k.size(), 98);
  const ops::RopeTable rope = ops::rope_table(positions, hd, 10000.0f);
  for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::NeoX}) {
    std::vector<float> fused_k(static_cast<size_t>(n_blocks) * n_kv * bs * hd), fused_v(fused_k.size());
    std::vector<float> plain_k(fused_k.size()), plain_v(fused_k.size());
    const KvLayerView fused{fused_k.data(), fused_v.data(), KvType::F32, true, bs, n_kv, hd, hd, hd, n_blocks};
    const KvLayerView plain{plain_k.data(), plain_v.data(), KvType::F32, true, bs, n_kv, hd, hd, hd, n_blocks};
    ops::kv_store(fused, rows, ops::KvWrite{k.data(), v.data(), &rope, style}, n_tok);
    std::vector<float> rotated = k;
    ops::rope(rotated.data(), rope, n_kv, hd, style);
    ops::kv_store(plain, rows, ops::KvWrite{rotated.data(), v.data()}, n_tok);
    EXPECT_EQ(fused_k, plain_k);
    EXPECT_EQ(fused_v, plain_v);
    EXPECT_EQ(std::count_if(fused_k.begin(), fused_k.end(), [](float x) { return x != 0.0f; }), n_tok * n_kv * hd);
  }
}

// Attention that stores the batch's K/V rows itself equals kv_store then attention, in the cache it leaves
// and in its output: a decode batch of three sequences (each thread stores the heads it attends with),
// one sequence's prefill (stored up front), and the generic path's 6-token pages; F32, F16, BF16 pages.
TEST(Kernels, AttentionStoringRowsEqualsStoreThenAttend) {
  ThreadPool pool(2);
  const int n_heads = 8, n_kv = 2, hd = 64, n_blocks = 12;
  const std::vector<int32_t> table_a = {3, 0, 7, 8, 10, 6}, table_b = {5, 1}, table_c = {2, 9, 4, 11};
  struct Batch { std::vector<int32_t> positions; std::vector<const int32_t*> tables; };
  const std::vector<Batch> batches = {
      {{20, 7, 23}, {table_a.data(), table_b.data(), table_c.data()}},      // decode: one token per sequence
      {{4, 5, 6, 7, 8}, {table_a.data(), table_a.data(), table_a.data(), table_a.data(), table_a.data()}}};
  for (const auto& [bs, type] : std::vector<std::pair<int, KvType>>{
           {16, KvType::F32}, {16, KvType::F16}, {16, KvType::BF16}, {6, KvType::F16}}) {
    for (const Batch& batch : batches) {
      const int n_tok = static_cast<int>(batch.positions.size());
      SCOPED_TRACE("block_size " + std::to_string(bs) + " type " + std::to_string(static_cast<int>(type)) +
                   " tokens " + std::to_string(n_tok));
      const size_t bytes = static_cast<size_t>(n_blocks) * n_kv * bs * hd * (type == KvType::F32 ? 4 : 2);
      std::vector<uint8_t> k_first(bytes), v_first(bytes), k_inside(bytes), v_inside(bytes);
      const KvLayerView first{k_first.data(), v_first.data(), type, true, bs, n_kv, hd, hd, hd, n_blocks};
      const KvLayerView inside{k_inside.data(), v_inside.data(), type, true, bs, n_kv, hd, hd, hd, n_blocks};
      fill_pages(first, 24, 25);  // earlier keys of every sequence, the same in both caches
      fill_pages(inside, 24, 25);
      const AttentionRows rows{batch.positions, batch.tables};
      const auto q = gaussian_vector(static_cast<size_t>(n_tok) * n_heads * hd, 26, 0.3f);
      const auto k = gaussian_vector(static_cast<size_t>(n_tok) * n_kv * hd, 27), v = gaussian_vector(k.size(), 28);
      const ops::RopeTable rope = ops::rope_table(batch.positions, hd, 10000.0f);
      std::vector<float> want(q.size()), got(q.size());
      ops::kv_store(first, rows, ops::KvWrite{k.data(), v.data(), &rope, RopeStyle::NeoX}, n_tok);
      ops::attention_paged(pool, q.data(), first, rows, want.data(), n_tok, n_heads, 0.125f);
      const ops::KvWrite write{k.data(), v.data(), &rope, RopeStyle::NeoX};
      ops::attention_paged(pool, q.data(), inside, rows, got.data(), n_tok, n_heads, 0.125f, &write);
      EXPECT_EQ(k_inside, k_first);
      EXPECT_EQ(v_inside, v_first);
      EXPECT_EQ(got, want);
    }
  }
}

// Attention over scattered pages of two sequences, for each page layout the cache uses: transposed K pages
// of 16 or 32 tokens and of 4 or 8 (the page kernel, its tiles spanning pages; F32, F16 and BF16 elements),
// and 6-token pages (the generic path); groups of 4 and 6 query heads per KV head (each group one pass of the
// page kernels).
TEST(Kernels, PagedAttentionMatchesFullSoftmax) {
  ThreadPool pool(2);
  const int n_kv = 2, n_blocks = 48;
  for (const int n_heads : {8, 12})
  // Head widths on the 16-lane grid, and off it (value lanes past the last vector: tiny models' 8).
  for (const int hd : {64, 8, 40, 12})
  for (const auto& [bs, type] : std::vector<std::pair<int, KvType>>{
           {16, KvType::F32}, {16, KvType::F16}, {32, KvType::F16}, {16, KvType::BF16}, {32, KvType::BF16},
           {4, KvType::F32}, {4, KvType::F16}, {4, KvType::BF16}, {8, KvType::F32}, {8, KvType::F16},
           {8, KvType::BF16}, {6, KvType::F32}, {6, KvType::F16}}) {
    SCOPED_TRACE(std::to_string(n_heads) + " heads, head width " + std::to_string(hd) + " block_size " + std::to_string(bs) + " type " +
                 std::to_string(static_cast<int>(type)));
    const size_t elems = static_cast<size_t>(n_blocks) * n_kv * bs * hd, bytes = elems * (type == KvType::F16 ? 2 : 4);
    std::vector<uint8_t> k(bytes), v(bytes);
    KvLayerView kv{k.data(), v.data(), type, true, bs, n_kv, hd, hd, hd, n_blocks};
    fill_pages(kv, 21, 22);
    std::vector<int32_t> table_a(n_blocks);
    for (int i = 0; i < n_blocks; ++i) table_a[static_cast<size_t>(i)] = (i * 7 + 3) % n_blocks;  // scattered
    const std::vector<int32_t> table_b = {1, 11, 3, 40};
    std::vector<int32_t> positions = {0, 5, 17, 19, 3, 10};
    std::vector<const int32_t*> tables = {table_a.data(), table_a.data(), table_a.data(), table_a.data(),
                                          table_b.data(), table_b.data()};
    // Around the kernel's 128-key softmax chunks, and the whole of sequence a.
    for (int32_t pos : {126, 127, 128, 145, 161, bs * n_blocks - 1}) {
      positions.push_back(pos);
      tables.push_back(table_a.data());
    }
    const AttentionRows rows{positions, tables};
    const int n_tok = static_cast<int>(positions.size());
    const auto q = gaussian_vector(static_cast<size_t>(n_tok) * n_heads * hd, 23, 0.3f);
    std::vector<float> want(q.size());
    ref::attention(q.data(), kv, rows, want.data(), n_tok, n_heads, 0.125f);
    // BF16 pages (with AVX-512 BF16) also round the probabilities to BF16 for the value products.
    test::expect_attention_on_every_isa(pool, q, kv, rows, n_heads, 0.125f, {{want, type == KvType::BF16 ? 1e-2f : 2e-5f}});
  }
}

TEST(Kernels, LatentAttentionWithValueInsideKeyRows) {
  // MLA layout: one cached row per token of k_dim floats whose first v_dim floats are the value.
  ThreadPool pool(2);
  const int n_heads = 4, k_dim = 80, v_dim = 64, bs = 16, n_blocks = 3;
  std::vector<float> k = gaussian_vector(static_cast<size_t>(n_blocks) * bs * k_dim, 31);
  KvLayerView kv{k.data(), k.data(), KvType::F32, false, bs, 1, k_dim, v_dim, k_dim, n_blocks};
  const std::vector<int32_t> table = {2, 0, 1};
  const std::vector<int32_t> positions = {0, 15, 16, 40};
  const std::vector<const int32_t*> tables(positions.size(), table.data());
  const AttentionRows rows{positions, tables};
  const int n_tok = static_cast<int>(positions.size());
  const auto q = gaussian_vector(static_cast<size_t>(n_tok) * n_heads * k_dim, 32, 0.2f);
  std::vector<float> got(static_cast<size_t>(n_tok) * n_heads * v_dim), want(got.size());
  ops::attention_paged(pool, q.data(), kv, rows, got.data(), n_tok, n_heads, 0.125f);
  ref::attention(q.data(), kv, rows, want.data(), n_tok, n_heads, 0.125f);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

}  // namespace

TEST(TaskGrain, TasksHoldTheLeastWorkInWholeTiles) {
  EXPECT_EQ(grain_for_macs(kMinTaskMacs), 1u);
  EXPECT_EQ(grain_for_macs(2 * kMinTaskMacs), 1u);
  EXPECT_EQ(grain_for_macs(kMinTaskMacs - 1), 2u);
  EXPECT_EQ(grain_for_macs(64), kMinTaskMacs / 64);
  EXPECT_EQ(grain_for_macs(kMinTaskMacs, 16), 16u);       // at least min_items
  EXPECT_EQ(grain_for_macs(kMinTaskMacs / 20, 16), 32u);  // 20 items, rounded up to whole tiles of 16
  EXPECT_EQ(grain_for_macs(0), kMinTaskMacs);             // no division by zero
}

}  // namespace kestrel
