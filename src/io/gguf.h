// GGUF (versions 2 and 3): a validating reader over a memory-mapped file and a streaming writer.
//
// Reader contract: every count, length, offset, dimension and type id read from the file is checked
// against the bytes that remain before it is used, so a truncated or hostile file yields an Error
// (naming the field, expected vs actual) and never an out-of-bounds read or a huge allocation.
// Tensor views returned by the reader point into the mapping and live as long as the GgufFile.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/mapped_file.h"

namespace kestrel {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

// One metadata value. Scalars live in `number` (or `text` for strings); arrays in `numbers` or
// `strings` depending on `array_type`.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT32;
  GgufValueType array_type = GgufValueType::UINT32;
  double number = 0;  // every numeric scalar and bool, converted (int64 beyond 2^53 loses precision)
  int64_t integer = 0;  // exact value for integer scalars
  std::string text;
  std::vector<double> numbers;
  std::vector<std::string> strings;

  bool is_array() const { return type == GgufValueType::ARRAY; }
  size_t array_size() const { return array_type == GgufValueType::STRING ? strings.size() : numbers.size(); }
  std::string to_display_string(size_t max_items = 8) const;
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  static Result<GgufFile> parse(std::shared_ptr<MappedFile> file);

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  const std::string& path() const { return file_->path(); }
  size_t file_size() const { return file_->size(); }

  const std::vector<std::string>& keys() const { return key_order_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: nullopt when absent; Error when present with an incompatible type.
  Result<std::optional<int64_t>> get_int(const std::string& key) const;
  Result<std::optional<double>> get_float(const std::string& key) const;
  Result<std::optional<bool>> get_bool(const std::string& key) const;
  Result<std::optional<std::string>> get_string(const std::string& key) const;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<std::string> key_order_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3. Usage: set metadata, declare tensors in file order, then write() which asks
// `produce(i, bytes)` for each tensor's data in turn (so multi-GiB models never sit in memory whole).
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Any value as a reader returned it, in its own value and element types (copying a file's metadata).
  void set_value(const std::string& key, const GgufValue& v);

  // dims are ggml order (innermost first). Returns the tensor's index.
  size_t add_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims);
  size_t tensor_bytes(size_t index) const;

  using Producer = std::function<void(size_t index, std::vector<uint8_t>& bytes)>;
  Status write(const std::string& path, const Producer& produce, size_t alignment = 32) const;
  // Header and metadata only (what precedes the data section), for tests that build files in memory.
  std::vector<uint8_t> serialize(const Producer& produce, size_t alignment = 32) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // type id + value, little-endian
  };
  struct TensorDecl {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
  };
  void set_raw(const std::string& key, std::vector<uint8_t> encoded);
  std::vector<uint8_t> header(size_t alignment) const;
  std::vector<Entry> entries_;
  std::vector<TensorDecl> tensors_;
};

}  // namespace kestrel
