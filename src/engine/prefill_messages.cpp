#include "engine/prefill_messages.h"

#include "core/byte_codec.h"

namespace kestrel {
namespace {
constexpr uint32_t kPrefillMagic = 0x3144504B;  // "KPD1"
}  // namespace

std::vector<uint8_t> encode_prefill_message(const PrefillMessage& m) {
  ByteWriter w;
  w.put(kPrefillMagic);
  w.put(static_cast<uint8_t>(m.kind));
  switch (m.kind) {
    case PrefillMessageKind::Job:
      w.put(m.seq_id);
      w.put_string(m.cache_salt);
      w.put_array(m.tokens);
      break;
    case PrefillMessageKind::Cancel:
      w.put(m.seq_id);
      break;
    case PrefillMessageKind::Pages:
      w.put(m.seq_id);
      w.put(m.first_page);
      w.put_array(m.pages);
      break;
    case PrefillMessageKind::Done:
      w.put(m.seq_id);
      w.put(m.n_cached);
      w.put(m.queue_ms);
      w.put(m.compute_ms);
      w.put_array(m.logits);
      break;
    case PrefillMessageKind::Stats: {
      const PrefillWorkerStats& st = m.stats;
      for (int32_t v : {st.kv_blocks_total, st.kv_blocks_used, st.kv_blocks_cached, st.n_waiting, st.n_running}) w.put(v);
      for (int64_t v : {st.prompt_tokens, st.prompt_tokens_cached, st.steps}) w.put(v);
      w.put(st.forward_seconds);
      break;
    }
    case PrefillMessageKind::Stop:
    case PrefillMessageKind::Stopped:
      break;
  }
  return std::move(w.out);
}

Result<PrefillMessage> decode_prefill_message(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  PrefillMessage m;
  if (r.get<uint32_t>("magic") != kPrefillMagic && r.error.empty()) r.fail("bad magic");
  const auto kind = r.get<uint8_t>("kind");
  if (r.error.empty() && (kind < static_cast<uint8_t>(PrefillMessageKind::Job) ||
                          kind > static_cast<uint8_t>(PrefillMessageKind::Stopped)))
    r.fail("unknown kind " + std::to_string(kind));
  if (!r.error.empty()) return Error{"malformed prefill message: " + r.error};
  m.kind = static_cast<PrefillMessageKind>(kind);
  switch (m.kind) {
    case PrefillMessageKind::Job:
      m.seq_id = r.get<int64_t>("sequence id");
      r.get_string(m.cache_salt, "cache salt");
      r.get_array(m.tokens, "tokens");
      if (r.error.empty() && m.tokens.empty()) r.fail("a job without tokens");
      break;
    case PrefillMessageKind::Cancel:
      m.seq_id = r.get<int64_t>("sequence id");
      break;
    case PrefillMessageKind::Pages:
      m.seq_id = r.get<int64_t>("sequence id");
      m.first_page = r.get<int32_t>("first page");
      r.get_array(m.pages, "pages");
      if (m.first_page < 0) r.fail("negative page index");
      break;
    case PrefillMessageKind::Done:
      m.seq_id = r.get<int64_t>("sequence id");
      m.n_cached = r.get<int32_t>("cached tokens");
      m.queue_ms = r.get<double>("queue time");
      m.compute_ms = r.get<double>("compute time");
      r.get_array(m.logits, "logits");
      if (m.n_cached < 0) r.fail("negative cached token count");
      break;
    case PrefillMessageKind::Stats: {
      PrefillWorkerStats& st = m.stats;
      for (int32_t* v : {&st.kv_blocks_total, &st.kv_blocks_used, &st.kv_blocks_cached, &st.n_waiting, &st.n_running})
        *v = r.get<int32_t>("stats");
      for (int64_t* v : {&st.prompt_tokens, &st.prompt_tokens_cached, &st.steps}) *v = r.get<int64_t>("stats");
      st.forward_seconds = r.get<double>("stats");
      break;
    }
    case PrefillMessageKind::Stop:
    case PrefillMessageKind::Stopped:
      break;
  }
  if (m.seq_id < 0) r.fail("negative sequence id");
  r.expect_end("message");
  if (!r.error.empty()) return Error{"malformed prefill message: " + r.error};
  return m;
}

}  // namespace kestrel
