#include "engine/step_plan.h"

#include <cstring>
#include <string>

namespace kestrel {

int32_t StepPlan::n_tokens() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.n_tokens();
  return n;
}

int32_t StepPlan::n_logits() const {
  int32_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.n_logits;
  return n;
}

namespace {

constexpr uint32_t kPlanMagic = 0x3150534B;  // "KSP1"

class PlanWriter {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  void put_ids(const std::vector<int32_t>& ids) {
    put(static_cast<int32_t>(ids.size()));
    const size_t at = out.size();
    out.resize(at + ids.size() * sizeof(int32_t));
    if (!ids.empty()) std::memcpy(out.data() + at, ids.data(), ids.size() * sizeof(int32_t));
  }
  std::vector<uint8_t> out;
};

// Reads the writer's values back; the first read past the end (or a bad count) sets error and every later
// read returns zeros.
class PlanReader {
 public:
  explicit PlanReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
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
  void get_ids(std::vector<int32_t>& ids, const char* what) {
    ids.resize(static_cast<size_t>(count(what, sizeof(int32_t))));
    if (!ids.empty()) take(ids.data(), ids.size() * sizeof(int32_t), what);
  }
  size_t left() const { return bytes_.size() - at_; }
  void fail(const std::string& why) {
    if (error.empty()) error = why;
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

}  // namespace

std::vector<uint8_t> encode_step_plan(const StepPlan& plan) {
  PlanWriter w;
  w.put(kPlanMagic);
  w.put(static_cast<int32_t>(plan.copies.size()));
  for (const BlockCopy& c : plan.copies) {
    w.put(c.src);
    w.put(c.dst);
  }
  w.put(static_cast<int32_t>(plan.chunks.size()));
  for (const ScheduledChunk& c : plan.chunks) {
    w.put(c.seq_id);
    w.put(c.start);
    w.put(c.n_logits);
    w.put_ids(c.tokens);
    w.put_ids(c.pages);
  }
  w.put(static_cast<int32_t>(plan.preempted.size()));
  for (int64_t id : plan.preempted) w.put(id);
  return std::move(w.out);
}

Result<StepPlan> decode_step_plan(std::span<const uint8_t> bytes) {
  PlanReader r(bytes);
  if (r.get<uint32_t>("magic") != kPlanMagic && r.error.empty()) r.fail("bad magic");
  if (!r.error.empty()) return Error{"malformed step plan: " + r.error};
  StepPlan plan;
  plan.copies.resize(static_cast<size_t>(r.count("page copies", 2 * sizeof(int32_t))));
  for (BlockCopy& c : plan.copies) {
    c.src = r.get<int32_t>("page copy");
    c.dst = r.get<int32_t>("page copy");
    if (c.src < 0 || c.dst < 0) r.fail("negative page id in a copy");
  }
  plan.chunks.resize(static_cast<size_t>(r.count("chunks", sizeof(int64_t) + 4 * sizeof(int32_t))));
  for (ScheduledChunk& c : plan.chunks) {
    c.seq_id = r.get<int64_t>("chunk");
    c.start = r.get<int32_t>("chunk");
    c.n_logits = r.get<int32_t>("chunk");
    r.get_ids(c.tokens, "tokens");
    r.get_ids(c.pages, "pages");
    if (!r.error.empty()) break;
    if (c.start < 0 || c.n_logits < 0 || c.n_logits > c.n_tokens()) r.fail("chunk with a bad start or logit count");
    for (int32_t p : c.pages)
      if (p < 0) r.fail("negative page id in a chunk");
  }
  plan.preempted.resize(static_cast<size_t>(r.count("preempted", sizeof(int64_t))));
  for (int64_t& id : plan.preempted) id = r.get<int64_t>("preempted");
  if (r.error.empty() && r.left() != 0) r.fail(std::to_string(r.left()) + " bytes after the plan");
  if (!r.error.empty()) return Error{"malformed step plan: " + r.error};
  return plan;
}

}  // namespace kestrel
