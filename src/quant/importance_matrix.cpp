#include "quant/importance_matrix.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kestrel {
namespace {

// Appends n raw bytes (little-endian hosts only, as the rest of the file handling).
void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}
void put_i32(std::vector<uint8_t>& out, int32_t v) { put(out, &v, 4); }

// Reads little-endian fields from a byte span, failing once it runs out.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool i32(int32_t& v) { return take(&v, 4); }
  bool take(void* dst, size_t n) {
    if (bytes_.size() - at_ < n) return false;
    std::memcpy(dst, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

}  // namespace

const float* ImportanceMatrix::find(const std::string& name, int64_t slice) const {
  const auto it = tensors.find(name);
  if (it == tensors.end() || slice < 0 || slice >= it->second.n_slices || it->second.tokens[static_cast<size_t>(slice)] == 0)
    return nullptr;
  return it->second.mean_square.data() + static_cast<size_t>(slice * it->second.n_in);
}

const float* ImportanceMatrix::find_max_abs(const std::string& name, int64_t slice) const {
  if (!find(name, slice)) return nullptr;
  const Entry& e = tensors.find(name)->second;
  return e.max_abs.size() == e.mean_square.size() ? e.max_abs.data() + static_cast<size_t>(slice * e.n_in) : nullptr;
}

Status ImportanceMatrix::fit_rows(const std::map<std::string, int64_t>& row_length) {
  for (auto it = tensors.begin(); it != tensors.end();) {
    const auto n = row_length.find(it->first);
    if (n == row_length.end()) {
      it = tensors.erase(it);
      continue;
    }
    Entry& e = it->second;
    const int64_t values = static_cast<int64_t>(e.mean_square.size());
    if (n->second <= 0 || values % n->second)
      return Error{"importance of '" + it->first + "': " + std::to_string(values) + " values do not split into rows of " +
                   std::to_string(n->second)};
    const int64_t calls = e.tokens.empty() ? 0 : e.tokens[0];
    e.n_in = n->second;
    e.n_slices = values / n->second;
    e.tokens.assign(static_cast<size_t>(e.n_slices), calls);
    ++it;
  }
  return Status{};
}

std::vector<uint8_t> serialize_imatrix(const ImportanceMatrix& m, int32_t chunks, const std::string& dataset) {
  std::vector<const std::pair<const std::string, ImportanceMatrix::Entry>*> stored;
  for (const auto& entry : m.tensors) {
    bool complete = !entry.second.tokens.empty();
    for (int64_t t : entry.second.tokens) complete = complete && t > 0;
    if (complete) stored.push_back(&entry);
  }
  const int32_t ncall = std::max(chunks, 1);
  std::vector<uint8_t> out;
  put_i32(out, static_cast<int32_t>(stored.size()));
  for (const auto* entry : stored) {
    put_i32(out, static_cast<int32_t>(entry->first.size()));
    put(out, entry->first.data(), entry->first.size());
    put_i32(out, ncall);
    put_i32(out, static_cast<int32_t>(entry->second.mean_square.size()));
    for (float v : entry->second.mean_square) {
      const float scaled = v * static_cast<float>(ncall);
      put(out, &scaled, 4);
    }
  }
  put_i32(out, ncall);
  put_i32(out, static_cast<int32_t>(dataset.size()));
  put(out, dataset.data(), dataset.size());
  return out;
}

Status write_imatrix_file(const ImportanceMatrix& m, int32_t chunks, const std::string& dataset, const std::string& path) {
  const std::vector<uint8_t> bytes = serialize_imatrix(m, chunks, dataset);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) return Error{"cannot write " + path};
  return Status{};
}

Result<ImportanceMatrix> parse_imatrix(std::span<const uint8_t> bytes) {
  Reader in(bytes);
  int32_t n_entries;
  if (!in.i32(n_entries) || n_entries < 0) return Error{"imatrix: bad entry count"};
  ImportanceMatrix m;
  for (int32_t i = 0; i < n_entries; ++i) {
    const std::string at = "imatrix entry " + std::to_string(i + 1) + ": ";
    int32_t len, ncall, nval;
    if (!in.i32(len) || len <= 0 || len > 4096 || static_cast<size_t>(len) > in.left()) return Error{at + "bad name length"};
    std::string name(static_cast<size_t>(len), '\0');
    in.take(name.data(), name.size());
    if (!in.i32(ncall) || ncall <= 0) return Error{at + "'" + name + "' has no calls"};
    if (!in.i32(nval) || nval <= 0 || static_cast<size_t>(nval) > in.left() / 4) return Error{at + "'" + name + "' has a bad value count"};
    ImportanceMatrix::Entry e;
    e.n_in = nval;
    e.mean_square.resize(static_cast<size_t>(nval));
    in.take(e.mean_square.data(), e.mean_square.size() * 4);
    for (float& v : e.mean_square) {
      if (!std::isfinite(v) || v < 0) return Error{at + "'" + name + "' has a negative or non-finite value"};
      v /= static_cast<float>(ncall);
    }
    e.tokens = {ncall};
    if (!m.tensors.emplace(name, std::move(e)).second) return Error{at + "'" + name + "' appears twice"};
  }
  // The trailing chunk count and dataset name are optional (older files end here).
  return m;
}

Result<ImportanceMatrix> read_imatrix_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot open " + path};
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto parsed = parse_imatrix(bytes);
  if (!parsed.ok()) return Error{path + ": " + parsed.error()};
  return parsed;
}

}  // namespace kestrel
