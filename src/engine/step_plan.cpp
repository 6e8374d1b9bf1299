#include "engine/step_plan.h"

#include <string>

#include "core/byte_codec.h"

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
constexpr uint32_t kPlanMagic = 0x3250534B;  // "KSP2"
}  // namespace

std::vector<uint8_t> encode_step_plan(const StepPlan& plan) {
  ByteWriter w;
  w.put(kPlanMagic);
  w.put_array(plan.imported_pages);
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
    w.put_array(c.tokens);
    w.put_array(c.pages);
  }
  w.put(static_cast<int32_t>(plan.preempted.size()));
  for (int64_t id : plan.preempted) w.put(id);
  w.put(static_cast<int32_t>(plan.exports.size()));
  for (const PageExport& e : plan.exports) {
    w.put(e.seq_id);
    w.put(e.first_page);
    w.put_array(e.pages);
  }
  return std::move(w.out);
}

Result<StepPlan> decode_step_plan(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  if (r.get<uint32_t>("magic") != kPlanMagic && r.error.empty()) r.fail("bad magic");
  if (!r.error.empty()) return Error{"malformed step plan: " + r.error};
  StepPlan plan;
  r.get_array(plan.imported_pages, "imported pages");
  for (int32_t p : plan.imported_pages)
    if (p < 0) r.fail("negative imported page id");
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
    r.get_array(c.tokens, "tokens");
    r.get_array(c.pages, "pages");
    if (!r.error.empty()) break;
    if (c.start < 0 || c.n_logits < 0 || c.n_logits > c.n_tokens()) r.fail("chunk with a bad start or logit count");
    for (int32_t p : c.pages)
      if (p < 0) r.fail("negative page id in a chunk");
  }
  plan.preempted.resize(static_cast<size_t>(r.count("preempted", sizeof(int64_t))));
  for (int64_t& id : plan.preempted) id = r.get<int64_t>("preempted");
  plan.exports.resize(static_cast<size_t>(r.count("page exports", sizeof(int64_t) + 2 * sizeof(int32_t))));
  for (PageExport& e : plan.exports) {
    e.seq_id = r.get<int64_t>("page export");
    e.first_page = r.get<int32_t>("page export");
    r.get_array(e.pages, "exported pages");
    if (!r.error.empty()) break;
    if (e.seq_id < 0 || e.first_page < 0) r.fail("page export with a negative id or index");
    for (int32_t p : e.pages)
      if (p < 0) r.fail("negative exported page id");
  }
  r.expect_end("plan");
  if (!r.error.empty()) return Error{"malformed step plan: " + r.error};
  return plan;
}

}  // namespace kestrel
