// Importance matrix files (quant/importance_matrix.h): llama.cpp's imatrix layout written and read back,
// shaped to a model's tensors, and every malformed file refused with a message.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "quant/importance_matrix.h"
#include "test_support.h"

namespace kestrel {
namespace {

ImportanceMatrix sample() {
  ImportanceMatrix m;
  ImportanceMatrix::Entry q{4, 1, {0.5f, 1.0f, 2.0f, 0.0f}, {30}, {}};
  ImportanceMatrix::Entry experts{2, 3, {1, 2, 3, 4, 5, 6}, {10, 4, 7}, {}};
  ImportanceMatrix::Entry partial{2, 2, {1, 2, 0, 0}, {5, 0}, {}};  // an expert no token reached
  m.tensors["blk.0.attn_q.weight"] = q;
  m.tensors["blk.0.ffn_down_exps.weight"] = experts;
  m.tensors["blk.0.ffn_up_exps.weight"] = partial;
  return m;
}

TEST(ImportanceMatrixFile, RoundTripsInLlamaCppsLayout) {
  const std::vector<uint8_t> bytes = serialize_imatrix(sample(), 3, "calib.txt");
  // The layout, field by field: two complete entries (the partial one is left out, as llama-imatrix does).
  int32_t n_entries, name_len;
  std::memcpy(&n_entries, bytes.data(), 4);
  std::memcpy(&name_len, bytes.data() + 4, 4);
  EXPECT_EQ(n_entries, 2);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<size_t>(name_len)), "blk.0.attn_q.weight");
  float first;
  std::memcpy(&first, bytes.data() + 8 + name_len + 8, 4);
  EXPECT_EQ(first, 0.5f * 3);  // mean square times ncall
  const std::string tail = "calib.txt";
  EXPECT_EQ(std::string(bytes.end() - static_cast<std::ptrdiff_t>(tail.size()), bytes.end()), tail);

  const std::string path = test::temp_path("imatrix.dat");
  ASSERT_TRUE(write_imatrix_file(sample(), 3, "calib.txt", path).ok());
  auto read = read_imatrix_file(path);
  ASSERT_TRUE(read.ok()) << read.error();
  ImportanceMatrix m = std::move(read).value();
  ASSERT_EQ(m.tensors.size(), 2u);
  ASSERT_TRUE(m.fit_rows({{"blk.0.attn_q.weight", 4}, {"blk.0.ffn_down_exps.weight", 2}}).ok());
  const ImportanceMatrix want = sample();
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down_exps.weight"}) {
    const auto& got = m.tensors.at(name);
    const auto& w = want.tensors.at(name);
    EXPECT_EQ(got.n_in, w.n_in);
    EXPECT_EQ(got.n_slices, w.n_slices);
    for (int64_t s = 0; s < w.n_slices; ++s)
      for (int64_t i = 0; i < w.n_in; ++i)
        EXPECT_NEAR(m.find(name, s)[i], want.find(name, s)[i], 1e-6f * want.find(name, s)[i]);
  }
  // Rows that do not divide the values are named; tensors the model lacks are dropped.
  ImportanceMatrix again = parse_imatrix(serialize_imatrix(sample(), 3, "")).value();
  const Status bad = again.fit_rows({{"blk.0.attn_q.weight", 3}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("attn_q"), std::string::npos);
  ImportanceMatrix dropped = parse_imatrix(serialize_imatrix(sample(), 3, "")).value();
  ASSERT_TRUE(dropped.fit_rows({{"blk.0.attn_q.weight", 2}}).ok());
  EXPECT_EQ(dropped.tensors.size(), 1u);
  EXPECT_EQ(dropped.tensors.at("blk.0.attn_q.weight").n_slices, 2);
  std::filesystem::remove(path);
  EXPECT_FALSE(read_imatrix_file(path).ok());
}

TEST(ImportanceMatrixFile, RefusesMalformedFiles) {
  const std::vector<uint8_t> good = serialize_imatrix(sample(), 2, "x");
  // Cut anywhere inside the entries: refused (the trailing count and name are optional).
  const size_t entries_end = good.size() - 4 - 4 - 1;
  for (size_t n = 0; n < entries_end; ++n) {
    auto r = parse_imatrix(std::span<const uint8_t>(good.data(), n));
    ASSERT_FALSE(r.ok()) << n;
    ASSERT_FALSE(r.error().empty());
  }
  EXPECT_TRUE(parse_imatrix(std::span<const uint8_t>(good.data(), entries_end)).ok());
  const auto with = [&](size_t offset, auto value) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + offset, &value, sizeof(value));
    return parse_imatrix(b);
  };
  const size_t name_len = 19, ncall_at = 8 + name_len, nval_at = ncall_at + 4, value_at = nval_at + 4;
  EXPECT_FALSE(with(0, int32_t{-1}).ok());
  EXPECT_FALSE(with(4, int32_t{0}).ok());
  EXPECT_FALSE(with(4, int32_t{1 << 30}).ok());
  EXPECT_FALSE(with(ncall_at, int32_t{0}).ok());
  EXPECT_FALSE(with(nval_at, int32_t{-4}).ok());
  EXPECT_FALSE(with(nval_at, int32_t{1 << 29}).ok());
  EXPECT_FALSE(with(value_at, std::nanf("")).ok());
  EXPECT_FALSE(with(value_at, -1.0f).ok());
  // The same name twice.
  ImportanceMatrix one;
  one.tensors["a.weight"] = {1, 1, {1.0f}, {1}, {}};
  std::vector<uint8_t> twice = serialize_imatrix(one, 1, "");
  twice.resize(twice.size() - 8);  // drop the trailer
  std::vector<uint8_t> dup(twice.begin() + 4, twice.end());
  twice.insert(twice.end(), dup.begin(), dup.end());
  const int32_t two = 2;
  std::memcpy(twice.data(), &two, 4);
  auto r = parse_imatrix(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("twice"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
