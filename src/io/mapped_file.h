// A read-only memory map of a whole file. Tensor views point into it, so it must outlive them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace kestrel {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  // Wraps a caller-owned buffer (used by tests and the fuzzer); the buffer must outlive this object.
  static std::shared_ptr<MappedFile> from_memory(const uint8_t* data, size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owns_mapping_ = false;
  std::string path_;
};

}  // namespace kestrel
