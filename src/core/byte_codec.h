// Plain values and arrays to bytes and back, for messages between processes of the same machine type
// (native byte order): step plans (engine/step_plan.h) and prefill/decode messages
// (engine/prefill_messages.h). ByteReader never reads past its bytes: the first bad read records an error
// and every later read returns zeros, so a decoder checks `error` once at the end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace kestrel {

class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    put_bytes(&v, sizeof(T));
  }
  // A count, then the items.
  template <typename T>
  void put_array(const std::vector<T>& items) {
    put(static_cast<int32_t>(items.size()));
    put_bytes(items.data(), items.size() * sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<int32_t>(s.size()));
    put_bytes(s.data(), s.size());
  }
  // Out of line: inlined with a constant n, GCC 12 warns falsely about the vector's growth.
  [[gnu::noinline]] void put_bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out.insert(out.end(), p, p + n);
  }
  std::vector<uint8_t> out;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T get(const char* what) {
    T v{};
    if (!take(&v, sizeof(T), what)) return T{};
    return v;
  }
  // A count of items of item_bytes each that must fit in what is left.
  int32_t count(const char* what, size_t item_bytes) {
    const int32_t n = get<int32_t>(what);
    if (n < 0 || static_cast<size_t>(n) * item_bytes > bytes_.size() - at_) fail(std::string("bad count of ") + what);
    return error.empty() ? n : 0;
  }
  template <typename T>
  void get_array(std::vector<T>& items, const char* what) {
    items.resize(static_cast<size_t>(count(what, sizeof(T))));
    if (!items.empty()) take(items.data(), items.size() * sizeof(T), what);
  }
  void get_string(std::string& s, const char* what) {
    s.resize(static_cast<size_t>(count(what, 1)));
    if (!s.empty()) take(s.data(), s.size(), what);
  }
  size_t left() const { return bytes_.size() - at_; }
  void fail(const std::string& why) {
    if (error.empty()) error = why;
  }
  // Fails unless every byte was read.
  void expect_end(const char* what) {
    if (error.empty() && left() != 0) fail(std::to_string(left()) + " bytes after the " + what);
  }
  std::string error;

 private:
  bool take(void* dst, size_t n, const char* what) {
    if (!error.empty()) return false;
    if (n > bytes_.size() - at_) {
      fail(std::string("truncated at ") + what);
      return false;
    }
    std::memcpy(dst, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

}  // namespace kestrel
