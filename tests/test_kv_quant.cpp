// Quantized and rotated KV pages: the codecs against their formats' error bounds, the rotation, the page
// layouts (every type, transposed and row pages), and the quantized attention kernels against the scalar
// reference on every ISA this CPU runs.
#include <cmath>
#include <random>

#include "compute/cpu/attention.h"
#include "compute/kv_quant.h"
#include "compute/kv_rotation.h"
#include "compute/ref/ref_ops.h"
#include "attention_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

constexpr KvType kQuantTypes[] = {KvType::Q8_0, KvType::Q4_0, KvType::FP8, KvType::TQ4, KvType::TQ3};

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) { return test::gaussian_vector(n, seed, scale); }

// Relative RMS error of y against x.
double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) err += (x[i] - y[i]) * (x[i] - y[i]), ref += x[i] * x[i];
  return std::sqrt(err / ref);
}

// Bounds on the relative RMS error of a Gaussian row: the formats' known figures with headroom (q8_0
// ~0.5%, fp8 ~2.5%, q4_0 ~11%, Lloyd-Max 4-bit ~9.5%, 3-bit ~18%).
double error_bound(KvType t) {
  switch (t) {
    case KvType::Q8_0: return 0.008;
    case KvType::FP8: return 0.035;
    case KvType::Q4_0: return 0.13;
    case KvType::TQ4: return 0.11;
    case KvType::TQ3: return 0.20;
    default: return 0;
  }
}

// Queries as the q8_0 kernels use them: q * scale rounded to int8 per 32 values (max / 127, halves away
// from zero), back in float and divided by scale again.
std::vector<float> int8_queries(const std::vector<float>& q, int hd, float scale) {
  std::vector<float> out(q.size());
  for (size_t g = 0; g < q.size(); g += 32) {
    float amax = 0;
    for (size_t i = g; i < g + 32; ++i) amax = std::max(amax, std::fabs(q[i] * scale));
    for (size_t i = g; i < g + 32; ++i) {
      const float x = q[i] * scale * (amax > 0 ? 127.0f / amax : 0.0f);
      out[i] = static_cast<float>(static_cast<int>(x + (x >= 0 ? 0.5f : -0.5f))) * (amax / 127.0f) / scale;
    }
  }
  (void)hd;
  return out;
}

// Keys with a large shared offset (the mean trained models' keys carry): with the offset as the view's key
// center, read_k gives the original rows back and the error is a fraction of the uncentered one; values
// ignore the center.
TEST(KvQuant, CenteredKeysRoundTripWithTheirCenterAddedBack) {
  const int dim = 64, n_kv = 2, bs = 16, n_blocks = 2;
  std::vector<float> center(static_cast<size_t>(n_kv) * dim);  // [n_kv][dim]
  for (size_t i = 0; i < center.size(); ++i) center[i] = (i % 3 == 0 ? 6.0f : -4.0f) * (i % 2 ? 1.0f : -1.0f);
  const auto spread = gaussian(static_cast<size_t>(n_blocks) * n_kv * bs * dim, 31);
  for (KvType t : kQuantTypes) {
    SCOPED_TRACE(kv_type_name(t));
    std::vector<uint8_t> plain_k(static_cast<size_t>(n_blocks) * n_kv * bs * kv_row_bytes(t, dim)), centered_k(plain_k.size());
    std::vector<uint8_t> v1(plain_k.size()), v2(plain_k.size());
    const KvLayerView plain{plain_k.data(), v1.data(), t, true, bs, n_kv, dim, dim, dim, n_blocks, 3};
    KvLayerView centered{centered_k.data(), v2.data(), t, true, bs, n_kv, dim, dim, dim, n_blocks, 3};
    centered.k_center = center.data();
    std::vector<float> rows(spread.size()), from_plain(spread.size()), from_centered(spread.size()), v_back(spread.size());
    for (size_t r = 0; r < spread.size() / dim; ++r) {
      const int blk = static_cast<int>(r / (n_kv * bs)), h = static_cast<int>(r / bs % n_kv), o = static_cast<int>(r % bs);
      for (int i = 0; i < dim; ++i) rows[r * dim + i] = spread[r * dim + i] + center[static_cast<size_t>(h) * dim + i];
      plain.write_k(blk, h, o, rows.data() + r * dim);
      centered.write_k(blk, h, o, rows.data() + r * dim);
      centered.write_v(blk, h, o, rows.data() + r * dim);
      plain.read_k(blk, h, o, from_plain.data() + r * dim);
      centered.read_k(blk, h, o, from_centered.data() + r * dim);
      centered.read_v(blk, h, o, v_back.data() + r * dim);
    }
    double plain_err = 0, centered_err = 0, v_err = 0, spread_sq = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      plain_err += (from_plain[i] - rows[i]) * (from_plain[i] - rows[i]);
      centered_err += (from_centered[i] - rows[i]) * (from_centered[i] - rows[i]);
      v_err += (v_back[i] - rows[i]) * (v_back[i] - rows[i]);
      spread_sq += spread[i] * spread[i];
    }
    // Centered, the error is the format's on the spread alone; uncentered it scales with the offset.
    EXPECT_LT(std::sqrt(centered_err / spread_sq), error_bound(t));
    EXPECT_LT(centered_err, 0.25 * plain_err);
    EXPECT_NEAR(v_err, plain_err, 1e-6 * plain_err);  // V is written as K was without a center
  }
}

// One page per (block, head), rows written then read back through the view, for both K layouts.
TEST(KvQuant, RowsRoundTripWithinFormatBounds) {
  for (KvType t : kQuantTypes)
    for (int dim : {8, 32, 64, 80, 128, 576})
      for (bool transposed : {true, false}) {
        SCOPED_TRACE(std::string(kv_type_name(t)) + " dim " + std::to_string(dim) + (transposed ? " transposed" : " rows"));
        ASSERT_EQ(kv_row_check(t, dim), "");
        const int bs = 16, n_blocks = 2, n_kv = 2;
        std::vector<uint8_t> k(static_cast<size_t>(n_blocks) * n_kv * bs * kv_row_bytes(t, dim));
        std::vector<uint8_t> v(k.size());
        const KvLayerView kv{k.data(), v.data(), t, transposed, bs, n_kv, dim, dim, dim, n_blocks, 77};
        const auto x = gaussian(static_cast<size_t>(n_blocks) * n_kv * bs * dim, 5);
        std::vector<float> kx(x.size()), vx(x.size());
        for (size_t r = 0; r < x.size() / dim; ++r) {  // write every slot, then read them all back
          const int blk = static_cast<int>(r / (n_kv * bs)), h = static_cast<int>(r / bs % n_kv), o = static_cast<int>(r % bs);
          kv.write_k(blk, h, o, x.data() + r * dim);
          kv.write_v(blk, h, o, x.data() + r * dim);
        }
        for (size_t r = 0; r < x.size() / dim; ++r) {
          const int blk = static_cast<int>(r / (n_kv * bs)), h = static_cast<int>(r / bs % n_kv), o = static_cast<int>(r % bs);
          kv.read_k(blk, h, o, kx.data() + r * dim);
          kv.read_v(blk, h, o, vx.data() + r * dim);
        }
        EXPECT_LT(relative_rms_error(x, kx), error_bound(t));
        EXPECT_LT(relative_rms_error(x, vx), error_bound(t));
        EXPECT_GT(relative_rms_error(x, kx), error_bound(t) / 20);  // really quantized
      }
}

TEST(KvQuant, RowSizesAndChecks) {
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 64), 64u + 4u);  // 8.5 bits per value
  EXPECT_EQ(kv_row_bytes(KvType::Q4_0, 64), 32u + 4u);  // 4.5
  EXPECT_EQ(kv_row_bytes(KvType::TQ4, 64), 32u + 4u);
  EXPECT_EQ(kv_row_bytes(KvType::FP8, 128), 128u + 8u);
  EXPECT_EQ(kv_row_bytes(KvType::TQ3, 64), 24u + 4u);  // 3.5
  EXPECT_EQ(kv_row_bytes(KvType::F16, 64), 128u);
  EXPECT_EQ(kv_group_size(80), 16);  // latent attention's 64 + 16
  EXPECT_EQ(kv_row_bytes(KvType::Q8_0, 80), 80u + 10u);
  EXPECT_NE(kv_row_check(KvType::Q8_0, 36), "");  // no group of 8 or more fits
  EXPECT_NE(kv_row_check(KvType::TQ3, 12), "");   // 3-bit packing needs multiples of 8
  EXPECT_EQ(kv_row_check(KvType::F16, 40), "");
  for (KvType t : kAllKvTypes) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  EXPECT_EQ(parse_kv_type("Q8_0"), KvType::Q8_0);
  EXPECT_FALSE(parse_kv_type("q5_1").has_value());
  EXPECT_EQ(KvTypes(KvType::Q8_0, KvType::F16).name(), "q8_0/f16");
}

// Each level is the mean of a unit Gaussian over its cell (the centroid condition of Lloyd-Max), by
// numerical integration.
TEST(KvQuant, CodebooksAreLloydMaxForAUnitGaussian) {
  for (auto [t, n] : {std::pair{KvType::TQ4, 16}, std::pair{KvType::TQ3, 8}}) {
    const float* c = kv_codebook(t);
    for (int i = 0; i < n; ++i) {
      const double lo = i == 0 ? -12.0 : 0.5 * (c[i - 1] + c[i]), hi = i == n - 1 ? 12.0 : 0.5 * (c[i] + c[i + 1]);
      double mass = 0, moment = 0;
      const int steps = 200000;
      for (int s = 0; s < steps; ++s) {
        const double x = lo + (hi - lo) * (s + 0.5) / steps, w = std::exp(-0.5 * x * x);
        mass += w, moment += w * x;
      }
      EXPECT_NEAR(moment / mass, c[i], 2e-5) << kv_type_name(t) << " level " << i;
    }
  }
}

TEST(KvQuant, Fp8E4M3CodesRoundTripAndRoundToNearest) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN codes are never produced
    const float x = fp8_e4m3_decode(static_cast<uint8_t>(code));
    if (code == 0x80) continue;  // -0 encodes as itself or +0
    EXPECT_EQ(fp8_e4m3_encode(x), code) << code;
  }
  EXPECT_EQ(fp8_e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_encode(1000.0f), 0x7E);   // saturates
  EXPECT_EQ(fp8_e4m3_encode(1.0625f), 0x38);   // halfway between 1 and 1.125: to even
  EXPECT_EQ(fp8_e4m3_encode(1.07f), 0x39);
  for (int code = 0; code < 0x7F; ++code)  // the kernels' fp16 reading of the bits: value / 256
    EXPECT_EQ(kv_code_value(KvType::FP8, static_cast<uint8_t>(code)), fp8_e4m3_decode(static_cast<uint8_t>(code)) / 256.0f);
}

TEST(KvQuant, RotationIsOrthogonalAndSpreadsEnergy) {
  for (int dim : {8, 64, 128, 576}) {
    auto x = gaussian(static_cast<size_t>(dim), 9), y = gaussian(static_cast<size_t>(dim), 10);
    x[3] = 40.0f;  // an outlier channel
    double dot = 0, norm = 0;
    for (int i = 0; i < dim; ++i) dot += x[i] * y[i], norm += x[i] * x[i];
    auto rx = x, ry = y;
    kv_rotate(rx.data(), dim, 3);
    kv_rotate(ry.data(), dim, 3);
    double rdot = 0, rnorm = 0, rmax = 0;
    for (int i = 0; i < dim; ++i) rdot += rx[i] * ry[i], rnorm += rx[i] * rx[i], rmax = std::max(rmax, std::fabs(double(rx[i])));
    EXPECT_NEAR(rdot, dot, 1e-3 * norm);
    EXPECT_NEAR(rnorm, norm, 1e-4 * norm);
    if (dim >= 64) { EXPECT_LT(rmax, 20.0); }  // the outlier's energy is spread over the block
    kv_unrotate(rx.data(), dim, 3);
    for (int i = 0; i < dim; ++i) EXPECT_NEAR(rx[i], x[i], 1e-4) << i;
    auto other = x;
    kv_rotate(other.data(), dim, 4);  // another layer's seed: another rotation
    int same = 0;
    for (int i = 0; i < dim; ++i) same += std::fabs(other[i] - (i < dim ? rx[i] : 0)) < 1e-6;
    EXPECT_LT(same, dim);
  }
}

// The quantized page kernels against the full-softmax reference over the same decoded pages, on every
// ISA: every quantized type for K and V, and mixed pairs (quantized K or V beside another quantized type,
// F16 or F32); scattered pages, GQA groups of 1, 3 and 8, widths 32 to 256, positions around the 128-key
// chunks, keys with and without a center (the kernels score centered codes, the reference adds the center
// back). Every layout here must take a page kernel, not the generic path.
TEST(KvQuant, PagedAttentionMatchesReferenceOnEveryIsa) {
  ThreadPool pool(2);
  const int n_blocks = 24;
  std::vector<KvTypes> pairs(std::begin(kQuantTypes), std::end(kQuantTypes));
  for (const KvTypes mixed : {KvTypes{KvType::Q8_0, KvType::F16}, KvTypes{KvType::F16, KvType::Q8_0},
                              KvTypes{KvType::Q8_0, KvType::Q4_0}, KvTypes{KvType::Q4_0, KvType::Q8_0},
                              KvTypes{KvType::TQ4, KvType::TQ3}, KvTypes{KvType::TQ3, KvType::F32},
                              KvTypes{KvType::F16, KvType::TQ4}, KvTypes{KvType::FP8, KvType::Q8_0}})
    pairs.push_back(mixed);
  for (const KvTypes types : pairs)
    for (const auto& [hd, n_heads, n_kv, bs, centered] : std::vector<std::tuple<int, int, int, int, bool>>{
             {64, 8, 1, 16, false}, {128, 6, 2, 32, false}, {32, 2, 2, 16, false}, {256, 4, 1, 16, false},
             {64, 8, 2, 16, true}, {128, 4, 1, 32, true}}) {
      SCOPED_TRACE(types.name() + " head width " + std::to_string(hd) + " heads " + std::to_string(n_heads) + "/" +
                   std::to_string(n_kv) + " block " + std::to_string(bs) + (centered ? " centered" : ""));
      const size_t rows_per_layer = static_cast<size_t>(n_blocks) * n_kv * bs;
      std::vector<uint8_t> k(rows_per_layer * kv_row_bytes(types.k, hd)), v(rows_per_layer * kv_row_bytes(types.v, hd));
      KvLayerView kv{k.data(), v.data(), types, true, bs, n_kv, hd, hd, hd, n_blocks, 11};
      for (Isa isa : runnable_isas()) ASSERT_TRUE(attention_has_page_kernel(kv, isa)) << isa_name(isa);
      const auto center = gaussian(static_cast<size_t>(n_kv) * hd, 17, 3.0f);  // [n_kv][hd]
      if (centered) kv.k_center = center.data();
      auto kvals = gaussian(static_cast<size_t>(n_blocks) * n_kv * bs * hd, 12);
      if (centered)  // keys around a center near the one the view uses
        for (size_t i = 0; i < kvals.size(); ++i) kvals[i] += 0.9f * center[(i / hd / bs % n_kv) * hd + i % hd];
      const auto vvals = gaussian(kvals.size(), 13);
      for (size_t r = 0; r < kvals.size() / hd; ++r) {
        const int blk = static_cast<int>(r / (n_kv * bs)), h = static_cast<int>(r / bs % n_kv), o = static_cast<int>(r % bs);
        kv.write_k(blk, h, o, kvals.data() + r * hd);
        kv.write_v(blk, h, o, vvals.data() + r * hd);
      }
      std::vector<int32_t> table(n_blocks);
      for (int i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 7 + 3) % n_blocks;
      std::vector<int32_t> positions = {0, 5, 17, 126, 127, 128, 145, bs * n_blocks - 1};
      const std::vector<const int32_t*> tables(positions.size(), table.data());
      const AttentionRows rows{positions, tables};
      const int n_tok = static_cast<int>(positions.size());
      const auto q = gaussian(static_cast<size_t>(n_tok) * n_heads * hd, 14, 0.3f);
      std::vector<float> want(static_cast<size_t>(n_tok) * n_heads * hd), exact(want.size());
      // q8_0 keys score with integer dot products against the scaled query rounded to int8 per 32 values
      // (max / 127, round half away): the reference gets the same query, and the exact one stays close.
      const auto q_used = types.k == KvType::Q8_0 ? int8_queries(q, hd, 0.125f) : q;
      ref::attention(q_used.data(), kv, rows, want.data(), n_tok, n_heads, 0.125f);
      ref::attention(q.data(), kv, rows, exact.data(), n_tok, n_heads, 0.125f);
      test::expect_attention_on_every_isa(pool, q, kv, rows, n_heads, 0.125f, {{want, 2e-4f}, {exact, 1e-2f}});
    }
}

// Quantized pages the page kernels do not take (6-token pages, 8-wide heads, quantized beside BF16, K and V
// of different float types, latent attention's rows) go through the generic path, equal to the reference too.
TEST(KvQuant, GenericPathMatchesReference) {
  ThreadPool pool(2);
  struct Case { KvTypes types; int hd, bs; bool latent; };
  for (const Case& c : {Case{KvType::Q8_0, 64, 6, false}, Case{KvType::TQ3, 8, 16, false},
                        Case{{KvType::Q4_0, KvType::BF16}, 64, 16, false}, Case{{KvType::F16, KvType::TQ4}, 8, 16, false},
                        Case{{KvType::F32, KvType::F16}, 32, 16, false}, Case{KvType::TQ4, 96, 16, true},
                        Case{KvType::Q8_0, 80, 16, true}}) {
    SCOPED_TRACE(c.types.name() + " head width " + std::to_string(c.hd) + " block " + std::to_string(c.bs) +
                 (c.latent ? " latent" : ""));
    const int n_heads = 4, n_kv = c.latent ? 1 : 2, n_blocks = 12, v_dim = c.latent ? 64 : c.hd;
    std::vector<uint8_t> k(static_cast<size_t>(n_blocks) * n_kv * c.bs * kv_row_bytes(c.types.k, c.hd));
    std::vector<uint8_t> v(static_cast<size_t>(n_blocks) * n_kv * c.bs * kv_row_bytes(c.types.v, c.hd));
    const KvLayerView kv{k.data(), c.latent ? k.data() : v.data(), c.types, !c.latent, c.bs, n_kv, c.hd, v_dim, c.hd, n_blocks, 5};
    ASSERT_FALSE(attention_has_page_kernel(kv, detected_isa()));
    const auto vals = gaussian(static_cast<size_t>(n_blocks) * n_kv * c.bs * c.hd * 2, 15);
    for (size_t r = 0; r < vals.size() / c.hd / 2; ++r) {
      const int blk = static_cast<int>(r / (n_kv * c.bs)), h = static_cast<int>(r / c.bs % n_kv), o = static_cast<int>(r % c.bs);
      kv.write_k(blk, h, o, vals.data() + 2 * r * c.hd);
      if (!c.latent) kv.write_v(blk, h, o, vals.data() + (2 * r + 1) * c.hd);
    }
    const std::vector<int32_t> table = {4, 0, 11, 2, 9, 1, 7, 3, 10, 5, 8, 6};
    const std::vector<int32_t> positions = {0, 9, 40, n_blocks * c.bs - 1};
    const std::vector<const int32_t*> tables(positions.size(), table.data());
    const AttentionRows rows{positions, tables};
    const auto q = gaussian(positions.size() * n_heads * c.hd, 16, 0.3f);
    std::vector<float> want(positions.size() * n_heads * v_dim), got(want.size());
    ref::attention(q.data(), kv, rows, want.data(), static_cast<int>(positions.size()), n_heads, 0.125f);
    ops::attention_paged(pool, q.data(), kv, rows, got.data(), static_cast<int>(positions.size()), n_heads, 0.125f);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-4f) << i;
  }
}

// Decode over a long context with one KV head: the page kernels split each token's keys into parts that
// the two threads take separately (attention_key_parts) and merge them by their softmax states; the result
// equals the reference on every ISA (F16 pages, q8_0's integer kernel, tq4's rotated basis), including a
// token whose last part is shorter and one whose keys split into fewer whole pages.
TEST(KvQuant, LongDecodeSplitsKeysAcrossThreads) {
  ThreadPool pool(2);
  const int hd = 64, n_heads = 8, n_kv = 1, bs = 16, n_blocks = 200;
  for (KvType t : {KvType::F16, KvType::Q8_0, KvType::TQ4}) {
    SCOPED_TRACE(kv_type_name(t));
    std::vector<uint8_t> k(static_cast<size_t>(n_blocks) * n_kv * bs * kv_row_bytes(t, hd)), v(k.size());
    const KvLayerView kv{k.data(), v.data(), t, true, bs, n_kv, hd, hd, hd, n_blocks, 9};
    const auto vals = gaussian(static_cast<size_t>(n_blocks) * bs * hd * 2, 18);
    for (int r = 0; r < n_blocks * bs; ++r) {
      kv.write_k(r / bs, 0, r % bs, vals.data() + static_cast<size_t>(2 * r) * hd);
      kv.write_v(r / bs, 0, r % bs, vals.data() + static_cast<size_t>(2 * r + 1) * hd);
    }
    std::vector<int32_t> table(n_blocks);
    for (int i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 37 + 11) % n_blocks;
    for (const std::vector<int32_t>& positions : {std::vector<int32_t>{n_blocks * bs - 1}, std::vector<int32_t>{2999, 1203}}) {
      const std::vector<const int32_t*> tables(positions.size(), table.data());
      const AttentionRows rows{positions, tables};
      ASSERT_GT(attention_key_parts(rows, n_kv, pool.n_threads()), 1);
      const int n_tok = static_cast<int>(positions.size());
      const auto q = gaussian(static_cast<size_t>(n_tok) * n_heads * hd, 19, 0.5f);
      const auto q_used = t == KvType::Q8_0 ? int8_queries(q, hd, 0.125f) : q;
      std::vector<float> want(q.size());
      ref::attention(q_used.data(), kv, rows, want.data(), n_tok, n_heads, 0.125f);
      test::expect_attention_on_every_isa(pool, q, kv, rows, n_heads, 0.125f, {{want, t == KvType::F16 ? 2e-5f : 2e-4f}});
    }
  }
}

}  // namespace
}  // namespace kestrel
