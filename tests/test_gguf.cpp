// GGUF reader and writer: round trip, and rejection (with an error, never a crash) of malformed files.
#include <cstring>

#include "io/gguf.h"
#include "model/model_maker.h"
#include "test_support.h"

namespace kestrel {
namespace {

// A small valid file: two tensors of different types plus every kind of metadata value.
std::vector<uint8_t> sample_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("answer", 42);
  w.set_i32("negative", -7);
  w.set_f32("pi", 3.25f);
  w.set_bool("flag", true);
  w.set_string_array("words", {"alpha", "beta", ""});
  w.set_f32_array("floats", {1.5f, -2.f});
  w.set_i32_array("ints", {3, 4, 5});
  w.add_tensor("a", DType::F32, {4, 2});
  w.add_tensor("b", DType::Q8_0, {64, 3});
  return w.serialize([](size_t i, std::vector<uint8_t>& bytes) {
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(i * 31 + k);
  });
}

Result<GgufFile> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(MappedFile::from_memory(bytes.data(), bytes.size()));
}

TEST(Gguf, RoundTripsMetadataAndTensors) {
  const auto bytes = sample_file();
  auto f = parse(bytes);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_string("general.architecture").value(), "llama");
  EXPECT_EQ(*f->get_int("answer").value(), 42);
  EXPECT_EQ(*f->get_int("negative").value(), -7);
  EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("pi").value()), 3.25f);
  EXPECT_TRUE(*f->get_bool("flag").value());
  EXPECT_EQ(f->find("words")->strings, (std::vector<std::string>{"alpha", "beta", ""}));
  EXPECT_EQ(f->find("floats")->numbers, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f->find("ints")->numbers, (std::vector<double>{3, 4, 5}));
  EXPECT_FALSE(f->get_int("missing").value().has_value());
  EXPECT_FALSE(f->get_int("pi").ok());  // wrong type is an error, not a silent conversion
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorView* b = f->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::Q8_0);
  EXPECT_EQ(b->ne[0], 64);
  EXPECT_EQ(b->ne[1], 3);
  EXPECT_EQ(b->n_bytes, 3u * 2 * 34);
  EXPECT_EQ(b->data[0], static_cast<uint8_t>(31));
  EXPECT_EQ(static_cast<size_t>(b->data - bytes.data()) % 32, 0u);
}

TEST(Gguf, ReadsVersion2) {
  auto bytes = sample_file();
  bytes[4] = 2;
  EXPECT_TRUE(parse(bytes).ok());
}

TEST(Gguf, RejectsEveryTruncation) {
  const auto bytes = sample_file();
  auto whole = parse(bytes);
  ASSERT_TRUE(whole.ok());
  const TensorView* last = whole->find_tensor("b");
  const size_t end_of_data = static_cast<size_t>(last->data + last->n_bytes - bytes.data());  // then padding
  // Every cut inside the header, metadata and tensor data.
  for (size_t cut = 0; cut < end_of_data; ++cut) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    auto f = parse(truncated);
    EXPECT_FALSE(f.ok()) << "cut at " << cut << " of " << bytes.size();
    if (!f.ok()) {
      EXPECT_FALSE(f.error().empty());
    }
  }
}

// Finds the byte offset of a string in the file (for patching a field that follows it).
size_t offset_after(const std::vector<uint8_t>& bytes, const std::string& s) {
  const auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  EXPECT_NE(it, bytes.end()) << s;
  return static_cast<size_t>(it - bytes.begin()) + s.size();
}

template <typename T>
void patch(std::vector<uint8_t>& bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

void expect_error_containing(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  auto f = parse(bytes);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find(fragment), std::string::npos) << "error was: " << f.error();
}

TEST(Gguf, RejectsWrongMagic) {
  auto bytes = sample_file();
  bytes[0] = 'X';
  expect_error_containing(bytes, "bad magic");
}

TEST(Gguf, RejectsUnknownVersion) {
  auto bytes = sample_file();
  patch<uint32_t>(bytes, 4, 99);
  expect_error_containing(bytes, "version 99");
}

TEST(Gguf, RejectsAbsurdCounts) {
  auto bytes = sample_file();
  patch<uint64_t>(bytes, 8, 1ull << 60);  // tensor count
  expect_error_containing(bytes, "tensor count");
  bytes = sample_file();
  patch<uint64_t>(bytes, 16, 1ull << 60);  // metadata count
  expect_error_containing(bytes, "metadata count");
}

TEST(Gguf, RejectsStringLengthPastEnd) {
  auto bytes = sample_file();
  // The key "answer" is preceded by its u64 length.
  const size_t key_at = offset_after(bytes, "answer") - 6 - 8;
  patch<uint64_t>(bytes, key_at, 1ull << 40);
  expect_error_containing(bytes, "string length");
}

TEST(Gguf, RejectsBadValueType) {
  auto bytes = sample_file();
  patch<uint32_t>(bytes, offset_after(bytes, "answer"), 77);
  expect_error_containing(bytes, "value type 77");
}

TEST(Gguf, RejectsHugeArray) {
  auto bytes = sample_file();
  const size_t at = offset_after(bytes, "ints");  // type (u32 = 9), element type (u32), count (u64)
  patch<uint64_t>(bytes, at + 8, 1ull << 62);
  expect_error_containing(bytes, "claims");
}

TEST(Gguf, RejectsBadTensorFields) {
  // Tensor "b": name, n_dims (u32), ne[0..1] (u64), type (u32), offset (u64).
  const auto good = sample_file();
  const size_t info = offset_after(good, std::string("\x01\x00\x00\x00\x00\x00\x00\x00" "b", 9));
  auto bytes = good;
  patch<uint32_t>(bytes, info, 9);
  expect_error_containing(bytes, "dimensions");
  bytes = good;
  patch<uint64_t>(bytes, info + 4, 1ull << 45);
  expect_error_containing(bytes, "dimension 0");
  bytes = good;
  patch<uint64_t>(bytes, info + 4, 0);
  expect_error_containing(bytes, "dimension 0");
  bytes = good;
  patch<uint64_t>(bytes, info + 4, 40);  // not a multiple of the Q8_0 block
  expect_error_containing(bytes, "block size");
  bytes = good;
  patch<uint32_t>(bytes, info + 20, 250);
  expect_error_containing(bytes, "type id 250");
  bytes = good;
  patch<uint64_t>(bytes, info + 24, 1ull << 40);
  expect_error_containing(bytes, "outside the data section");
  bytes = good;
  patch<uint64_t>(bytes, info + 24, 3);
  expect_error_containing(bytes, "alignment");
}

TEST(Gguf, RejectsDuplicateKeysAndBadAlignment) {
  GgufWriter w;
  w.set_u32("general.alignment", 24);
  auto bytes = w.serialize([](size_t, std::vector<uint8_t>&) {});
  expect_error_containing(bytes, "power of two");
}

TEST(Gguf, CorruptedModelFailsToLoadWithMessage) {
  MakeModelOptions options;
  options.shape.n_layers = 1;
  const std::string path = test::temp_path("corrupt.gguf");
  ASSERT_TRUE(make_model(options, path).ok());
  std::string bytes = test::read_file(path);
  bytes.resize(bytes.size() / 2);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("truncated"), std::string::npos) << f.error();
  std::filesystem::remove(path);
}

TEST(Gguf, RandomMutationsNeverCrash) {
  // A quick deterministic mutation sweep; the libFuzzer target explores much further in CI.
  const auto good = sample_file();
  uint64_t state = 12345;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = good;
    for (int k = 0; k < 4; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      bytes[(state >> 33) % std::min<size_t>(bytes.size(), 700)] = static_cast<uint8_t>(state >> 20);
    }
    auto f = parse(bytes);
    if (!f.ok()) continue;
    for (const auto& t : f->tensors()) ASSERT_LE(t.data + t.n_bytes, bytes.data() + bytes.size());
  }
}

}  // namespace
}  // namespace kestrel
