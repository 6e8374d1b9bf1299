#include "io/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace kestrel {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringBytes = 1u << 30;
constexpr int kMaxDims = 4;

// Reads little-endian fields from [pos, end), failing with a message that names the field.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status read(T& out, const char* what) {
    if (remaining() < sizeof(T))
      return Error{std::string("truncated file: reading ") + what + " at offset " + std::to_string(pos_) +
                   " needs " + std::to_string(sizeof(T)) + " bytes, " + std::to_string(remaining()) + " remain"};
    std::memcpy(&out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }

  Status read_string(std::string& out, const char* what) {
    uint64_t len = 0;
    KESTREL_TRY(read(len, what));
    if (len > remaining() || len > kMaxStringBytes)
      return Error{std::string("string length of ") + what + " at offset " + std::to_string(pos_ - 8) + " is " +
                   std::to_string(len) + " bytes, but only " + std::to_string(remaining()) + " remain"};
    out.assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return {};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    default: return 0;
  }
}

bool is_integer_type(GgufValueType t) {
  return t != GgufValueType::FLOAT32 && t != GgufValueType::FLOAT64 && scalar_size(t) != 0;
}

// Reads one numeric scalar of type t (never STRING/ARRAY) into integer and number.
Status read_number(Cursor& c, GgufValueType t, int64_t& integer, double& number, const std::string& key) {
  const char* what = key.c_str();
  switch (t) {
    case GgufValueType::UINT8: { uint8_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::INT8: { int8_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::BOOL: {
      uint8_t v; KESTREL_TRY(c.read(v, what));
      if (v > 1) return Error{"bool value of '" + key + "' is " + std::to_string(v) + ", expected 0 or 1"};
      integer = v; break;
    }
    case GgufValueType::UINT16: { uint16_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::INT16: { int16_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::UINT32: { uint32_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::INT32: { int32_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::UINT64: {
      uint64_t v; KESTREL_TRY(c.read(v, what));
      integer = v > (uint64_t)std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : (int64_t)v;
      break;
    }
    case GgufValueType::INT64: { int64_t v; KESTREL_TRY(c.read(v, what)); integer = v; break; }
    case GgufValueType::FLOAT32: { float v; KESTREL_TRY(c.read(v, what)); number = v; return {}; }
    case GgufValueType::FLOAT64: { double v; KESTREL_TRY(c.read(v, what)); number = v; return {}; }
    default: return Error{"internal: not a numeric type"};
  }
  number = static_cast<double>(integer);
  return {};
}

Status read_value(Cursor& c, GgufValue& v, const std::string& key) {
  uint32_t raw_type = 0;
  KESTREL_TRY(c.read(raw_type, key.c_str()));
  if (raw_type > static_cast<uint32_t>(GgufValueType::FLOAT64))
    return Error{"metadata '" + key + "' has value type " + std::to_string(raw_type) + ", expected 0..12"};
  v.type = static_cast<GgufValueType>(raw_type);
  if (v.type == GgufValueType::STRING) return c.read_string(v.text, key.c_str());
  if (v.type != GgufValueType::ARRAY) return read_number(c, v.type, v.integer, v.number, key);

  uint32_t elem_type = 0;
  uint64_t count = 0;
  KESTREL_TRY(c.read(elem_type, key.c_str()));
  KESTREL_TRY(c.read(count, key.c_str()));
  if (elem_type > static_cast<uint32_t>(GgufValueType::FLOAT64))
    return Error{"metadata array '" + key + "' has element type " + std::to_string(elem_type) + ", expected 0..12"};
  v.array_type = static_cast<GgufValueType>(elem_type);
  if (v.array_type == GgufValueType::ARRAY)
    return Error{"metadata array '" + key + "' nests arrays, which this reader does not support"};
  // Each element takes at least min_bytes, so the count can be bounded by what remains.
  const size_t min_bytes = v.array_type == GgufValueType::STRING ? 8 : scalar_size(v.array_type);
  if (count > c.remaining() / min_bytes)
    return Error{"metadata array '" + key + "' claims " + std::to_string(count) + " elements of at least " +
                 std::to_string(min_bytes) + " bytes, but only " + std::to_string(c.remaining()) + " bytes remain"};
  if (v.array_type == GgufValueType::STRING) {
    v.strings.resize(static_cast<size_t>(count));
    for (auto& s : v.strings) KESTREL_TRY(c.read_string(s, key.c_str()));
  } else {
    v.numbers.resize(static_cast<size_t>(count));
    int64_t integer = 0;
    for (auto& x : v.numbers) KESTREL_TRY(read_number(c, v.array_type, integer, x, key));
  }
  return {};
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < 13 ? names[i] : "?";
}

std::string GgufValue::to_display_string(size_t max_items) const {
  auto number_string = [](GgufValueType t, double x) {
    if (is_integer_type(t)) return std::to_string(static_cast<int64_t>(x));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  if (type == GgufValueType::STRING) return "\"" + text + "\"";
  if (type == GgufValueType::BOOL) return integer ? "true" : "false";
  if (!is_array()) return is_integer_type(type) ? std::to_string(integer) : number_string(type, number);
  std::string s = "[";
  const size_t n = array_size();
  for (size_t i = 0; i < n && i < max_items; ++i) {
    if (i) s += ", ";
    s += array_type == GgufValueType::STRING ? "\"" + strings[i] + "\"" : number_string(array_type, numbers[i]);
  }
  if (n > max_items) s += ", ... (" + std::to_string(n) + " items)";
  return s + "]";
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file.ok()) return Error{file.error()};
  auto parsed = parse(std::move(file).value());
  if (!parsed.ok()) return Error{path + ": " + parsed.error()};
  return parsed;
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<MappedFile> file) {
  GgufFile g;
  g.file_ = std::move(file);
  Cursor c(g.file_->data(), g.file_->size());

  uint32_t magic = 0;
  KESTREL_TRY(c.read(magic, "magic"));
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x, expected 0x%08x (\"GGUF\")", magic, kMagic);
    return Error{buf};
  }
  KESTREL_TRY(c.read(g.version_, "version"));
  if (g.version_ != 2 && g.version_ != 3)
    return Error{"unsupported GGUF version " + std::to_string(g.version_) + ", expected 2 or 3"};
  uint64_t n_tensors = 0, n_kv = 0;
  KESTREL_TRY(c.read(n_tensors, "tensor count"));
  KESTREL_TRY(c.read(n_kv, "metadata count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8+4+8+4+8.
  if (n_kv > c.remaining() / 13)
    return Error{"metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.remaining()) +
                 " bytes that remain"};
  if (n_tensors > c.remaining() / 32)
    return Error{"tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                 std::to_string(c.remaining()) + " bytes that remain"};

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    KESTREL_TRY(c.read_string(key, "metadata key"));
    if (g.metadata_.count(key)) return Error{"duplicate metadata key '" + key + "'"};
    GgufValue v;
    KESTREL_TRY(read_value(c, v, key));
    g.key_order_.push_back(key);
    g.metadata_.emplace(key, std::move(v));
  }

  if (const GgufValue* a = g.find("general.alignment")) {
    if (a->is_array() || !is_integer_type(a->type) || a->integer <= 0 || a->integer > (1 << 20) ||
        (a->integer & (a->integer - 1)) != 0)
      return Error{"general.alignment must be a power of two up to 1 MiB, got " + a->to_display_string()};
    g.alignment_ = static_cast<size_t>(a->integer);
  }

  struct RawInfo { uint64_t offset; };
  std::vector<RawInfo> raw(static_cast<size_t>(n_tensors));
  g.tensors_.resize(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorView& t = g.tensors_[i];
    KESTREL_TRY(c.read_string(t.name, "tensor name"));
    const std::string where = "tensor '" + t.name + "'";
    uint32_t n_dims = 0;
    KESTREL_TRY(c.read(n_dims, where.c_str()));
    if (n_dims < 1 || n_dims > kMaxDims)
      return Error{where + " has " + std::to_string(n_dims) + " dimensions, expected 1.." + std::to_string(kMaxDims)};
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      KESTREL_TRY(c.read(ne, where.c_str()));
      if (ne == 0 || ne > (1ull << 40) || n_elements > (1ull << 50) / ne)
        return Error{where + " dimension " + std::to_string(d) + " is " + std::to_string(ne) +
                     ", out of range (1..2^40, total elements below 2^50)"};
      n_elements *= ne;
      t.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t raw_type = 0;
    KESTREL_TRY(c.read(raw_type, where.c_str()));
    const auto traits = dtype_traits(raw_type);
    if (!traits)
      return Error{where + " has weight type id " + std::to_string(raw_type) +
                   ", which is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"};
    t.type = traits->type;
    if (t.ne[0] % traits->block_elems != 0)
      return Error{where + " row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                   traits->name + " block size " + std::to_string(traits->block_elems)};
    t.n_bytes = static_cast<size_t>(n_elements / traits->block_elems * traits->block_bytes);
    KESTREL_TRY(c.read(raw[i].offset, where.c_str()));
    if (raw[i].offset % g.alignment_ != 0)
      return Error{where + " data offset " + std::to_string(raw[i].offset) + " is not a multiple of the alignment " +
                   std::to_string(g.alignment_)};
    if (g.tensor_index_.count(t.name)) return Error{"duplicate tensor name '" + t.name + "'"};
    g.tensor_index_[t.name] = static_cast<size_t>(i);
  }

  g.data_offset_ = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (g.data_offset_ > g.file_->size() && n_tensors > 0)
    return Error{"tensor data section starts at " + std::to_string(g.data_offset_) + " but the file has " +
                 std::to_string(g.file_->size()) + " bytes"};
  const uint64_t data_size = g.file_->size() >= g.data_offset_ ? g.file_->size() - g.data_offset_ : 0;
  for (size_t i = 0; i < g.tensors_.size(); ++i) {
    TensorView& t = g.tensors_[i];
    if (raw[i].offset > data_size || t.n_bytes > data_size - raw[i].offset)
      return Error{"tensor '" + t.name + "' data [" + std::to_string(raw[i].offset) + ", " +
                   std::to_string(raw[i].offset + t.n_bytes) + ") lies outside the data section of " +
                   std::to_string(data_size) + " bytes (file truncated?)"};
    t.data = g.file_->data() + g.data_offset_ + raw[i].offset;
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const TensorView* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::optional<int64_t>> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<int64_t>();
  if (v->is_array() || !is_integer_type(v->type))
    return Error{"metadata '" + key + "' is " + gguf_value_type_name(v->type) + ", expected an integer"};
  return std::optional<int64_t>(v->integer);
}

Result<std::optional<double>> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<double>();
  if (v->is_array() || v->type == GgufValueType::STRING)
    return Error{"metadata '" + key + "' is " + gguf_value_type_name(v->type) + ", expected a number"};
  return std::optional<double>(v->number);
}

Result<std::optional<bool>> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<bool>();
  if (v->type != GgufValueType::BOOL)
    return Error{"metadata '" + key + "' is " + gguf_value_type_name(v->type) + ", expected bool"};
  return std::optional<bool>(v->integer != 0);
}

Result<std::optional<std::string>> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::string>();
  if (v->type != GgufValueType::STRING)
    return Error{"metadata '" + key + "' is " + gguf_value_type_name(v->type) + ", expected string"};
  return std::optional<std::string>(v->text);
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
}  // namespace

void GgufWriter::set_raw(const std::string& key, std::vector<uint8_t> encoded) {
  for (auto& e : entries_)
    if (e.key == key) { e.encoded = std::move(encoded); return; }
  entries_.push_back({key, std::move(encoded)});
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 4); put(e, v); set_raw(key, std::move(e));
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 5); put(e, v); set_raw(key, std::move(e));
}
void GgufWriter::set_f32(const std::string& key, float v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 6); put(e, v); set_raw(key, std::move(e));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 7); put<uint8_t>(e, v ? 1 : 0); set_raw(key, std::move(e));
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 8); put_string(e, v); set_raw(key, std::move(e));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 9); put<uint32_t>(e, 8); put<uint64_t>(e, v.size());
  for (const auto& s : v) put_string(e, s);
  set_raw(key, std::move(e));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 9); put<uint32_t>(e, 6); put<uint64_t>(e, v.size());
  for (float x : v) put(e, x);
  set_raw(key, std::move(e));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> e; put<uint32_t>(e, 9); put<uint32_t>(e, 5); put<uint64_t>(e, v.size());
  for (int32_t x : v) put(e, x);
  set_raw(key, std::move(e));
}

namespace {
// One numeric scalar of type t; integers from `integer` (or `number` inside arrays), floats from `number`.
void put_number(std::vector<uint8_t>& e, GgufValueType t, int64_t integer, double number) {
  switch (t) {
    case GgufValueType::UINT8: put<uint8_t>(e, static_cast<uint8_t>(integer)); break;
    case GgufValueType::INT8: put<int8_t>(e, static_cast<int8_t>(integer)); break;
    case GgufValueType::BOOL: put<uint8_t>(e, integer ? 1 : 0); break;
    case GgufValueType::UINT16: put<uint16_t>(e, static_cast<uint16_t>(integer)); break;
    case GgufValueType::INT16: put<int16_t>(e, static_cast<int16_t>(integer)); break;
    case GgufValueType::UINT32: put<uint32_t>(e, static_cast<uint32_t>(integer)); break;
    case GgufValueType::INT32: put<int32_t>(e, static_cast<int32_t>(integer)); break;
    case GgufValueType::UINT64: put<uint64_t>(e, static_cast<uint64_t>(integer)); break;
    case GgufValueType::INT64: put<int64_t>(e, integer); break;
    case GgufValueType::FLOAT32: put<float>(e, static_cast<float>(number)); break;
    case GgufValueType::FLOAT64: put<double>(e, number); break;
    default: break;  // STRING and ARRAY are not scalars
  }
}
}  // namespace

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  std::vector<uint8_t> e;
  put<uint32_t>(e, static_cast<uint32_t>(v.type));
  if (v.type == GgufValueType::STRING) {
    put_string(e, v.text);
  } else if (v.type == GgufValueType::ARRAY) {
    put<uint32_t>(e, static_cast<uint32_t>(v.array_type));
    put<uint64_t>(e, v.array_size());
    if (v.array_type == GgufValueType::STRING)
      for (const auto& s : v.strings) put_string(e, s);
    else
      for (double x : v.numbers) put_number(e, v.array_type, static_cast<int64_t>(x), x);
  } else {
    put_number(e, v.type, v.integer, v.number);
  }
  set_raw(key, std::move(e));
}

size_t GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims) {
  tensors_.push_back({name, type, dims});
  return tensors_.size() - 1;
}

size_t GgufWriter::tensor_bytes(size_t index) const {
  const auto& t = tensors_[index];
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  return row_bytes(t.type, static_cast<size_t>(t.dims[0])) * static_cast<size_t>(rows);
}

std::vector<uint8_t> GgufWriter::header(size_t alignment) const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, entries_.size() + (alignment != 32 ? 1 : 0));
  for (const auto& e : entries_) {
    put_string(out, e.key);
    out.insert(out.end(), e.encoded.begin(), e.encoded.end());
  }
  if (alignment != 32) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, 4);
    put<uint32_t>(out, static_cast<uint32_t>(alignment));
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (tensor_bytes(i) + alignment - 1) / alignment * alignment;
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
  return out;
}

std::vector<uint8_t> GgufWriter::serialize(const Producer& produce, size_t alignment) const {
  std::vector<uint8_t> out = header(alignment);
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    bytes.assign(tensor_bytes(i), 0);
    produce(i, bytes);
    out.insert(out.end(), bytes.begin(), bytes.end());
    out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
  }
  return out;
}

Status GgufWriter::write(const std::string& path, const Producer& produce, size_t alignment) const {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Error{"cannot create '" + path + "'"};
  const std::vector<uint8_t> head = header(alignment);
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  std::vector<uint8_t> bytes;
  const std::vector<uint8_t> zeros(alignment, 0);
  for (size_t i = 0; ok && i < tensors_.size(); ++i) {
    bytes.assign(tensor_bytes(i), 0);
    produce(i, bytes);
    ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const size_t pad = (alignment - bytes.size() % alignment) % alignment;
    ok = ok && std::fwrite(zeros.data(), 1, pad, f) == pad;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Error{"failed writing '" + path + "' (disk full?)"};
  return {};
}

}  // namespace kestrel
