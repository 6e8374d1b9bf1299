#include "engine/prefill_client.h"

#include <algorithm>
#include <chrono>

namespace kestrel {
namespace {
// Tokens of a prompt's beginning that choose its prefill rank (a shared system prompt is longer).
constexpr size_t kAffinityTokens = 32;
// A rank keeps prompts sharing a beginning unless it has this many more tokens queued than the least loaded.
constexpr int64_t kAffinitySlackTokens = 4096;

uint64_t beginning_hash(std::span<const int32_t> prompt, const std::string& salt) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (char c : salt) mix(static_cast<uint8_t>(c));
  mix(0xFFFF);
  for (size_t i = 0; i < std::min(prompt.size(), kAffinityTokens); ++i) mix(static_cast<uint32_t>(prompt[i]));
  return h;
}
}  // namespace

PrefillClient::PrefillClient(Communicator& world, int32_t group_size, size_t page_bytes, int32_t block_size,
                             int32_t n_vocab)
    : world_(world),
      channel_(world),
      group_size_(group_size),
      page_bytes_(page_bytes),
      block_size_(block_size),
      n_vocab_(n_vocab),
      queued_tokens_(static_cast<size_t>(world.size()), 0) {
  stats_.prefill_ranks = world.size() - group_size;
  stats_.group_size = group_size;
  stats_.workers.resize(static_cast<size_t>(n_workers()));
}

PrefillClient::~PrefillClient() {
  for (int worker = 1; worker <= n_workers(); ++worker)
    send(prefill_message(PrefillMessageKind::Stop), replica_leader(worker, group_size_));
  // Every prefill rank answers Stopped (a leader once told, the others once their leader stopped relaying)
  // after everything else it sent: take (and drop) messages until then.
  for (int n_stopped = 0; n_stopped < world_.size() - group_size_;) {
    const auto incoming = channel_.take(std::chrono::milliseconds(100));
    if (!incoming) continue;
    auto m = decode_prefill_message(incoming->bytes);
    if (m.ok() && m->kind == PrefillMessageKind::Stopped) ++n_stopped;
  }
}

int PrefillClient::pick_rank(std::span<const int32_t> prompt, const std::string& cache_salt) {
  int least = replica_leader(1, group_size_);
  for (int worker = 2; worker <= n_workers(); ++worker) {
    const int r = replica_leader(worker, group_size_);
    if (queued_tokens_[static_cast<size_t>(r)] < queued_tokens_[static_cast<size_t>(least)]) least = r;
  }
  const uint64_t key = beginning_hash(prompt, cache_salt);
  int rank = least;
  if (const auto it = affinity_.find(key); it != affinity_.end() &&
      queued_tokens_[static_cast<size_t>(it->second)] <= queued_tokens_[static_cast<size_t>(least)] + kAffinitySlackTokens)
    rank = it->second;
  if (affinity_.size() > 65536) affinity_.clear();  // bounded: a cleared map only costs cache affinity
  affinity_[key] = rank;
  return rank;
}

void PrefillClient::submit(int64_t seq_id, std::span<const int32_t> prompt, const std::string& cache_salt) {
  const int rank = pick_rank(prompt, cache_salt);
  PrefillMessage job = prefill_message(PrefillMessageKind::Job, seq_id);
  job.cache_salt = cache_salt;
  job.tokens.assign(prompt.begin(), prompt.end());
  send(job, rank);
  Outstanding& o = outstanding_[seq_id];
  o.rank = rank;
  o.n_tokens = static_cast<int32_t>(prompt.size());
  o.sent_s = clock_.elapsed_s();
  o.result.seq_id = seq_id;
  o.result.pages.resize(static_cast<size_t>(group_size_));
  queued_tokens_[static_cast<size_t>(rank)] += o.n_tokens;
}

void PrefillClient::cancel(int64_t seq_id) {
  const auto it = outstanding_.find(seq_id);
  if (it == outstanding_.end()) return;
  send(prefill_message(PrefillMessageKind::Cancel, seq_id), it->second.rank);
  queued_tokens_[static_cast<size_t>(it->second.rank)] -= it->second.n_tokens;
  outstanding_.erase(it);
}

std::vector<PrefilledPrompt> PrefillClient::poll() {
  std::vector<PrefilledPrompt> done;
  while (const auto incoming = channel_.take()) {
    auto m = decode_prefill_message(incoming->bytes);
    if (!m.ok()) world_.abort("rank 0: from prefill rank " + std::to_string(incoming->source) + ": " + m.error(), 1);
    handle(incoming->source, std::move(m).value(), done);
  }
  return done;
}

void PrefillClient::handle(int source, PrefillMessage m, std::vector<PrefilledPrompt>& done) {
  const std::string from = "rank 0: prefill rank " + std::to_string(source) + " ";
  const int leader = leader_of(source);
  if (source < group_size_) world_.abort("rank 0: a prefill message from decode rank " + std::to_string(source), 1);
  if (m.kind == PrefillMessageKind::Stats && source == leader) {
    stats_.workers[static_cast<size_t>(replica_of_rank(leader, group_size_) - 1)] = m.stats;
    return;
  }
  if (m.kind != PrefillMessageKind::Pages && !(m.kind == PrefillMessageKind::Done && source == leader))
    world_.abort(from + "sent an unexpected message kind " + std::to_string(static_cast<int>(m.kind)), 1);
  const auto it = outstanding_.find(m.seq_id);
  if (it == outstanding_.end()) return;  // cancelled: what was on its way is dropped
  Outstanding& o = it->second;
  if (o.rank != leader) world_.abort(from + "sent sequence " + std::to_string(m.seq_id) + " of another group", 1);
  PrefilledPrompt& r = o.result;
  const size_t prompt_bytes = static_cast<size_t>((o.n_tokens + block_size_ - 1) / block_size_) * page_bytes_;
  if (m.kind == PrefillMessageKind::Pages) {
    std::vector<uint8_t>& share = r.pages[static_cast<size_t>(source - leader)];
    if (m.pages.size() % page_bytes_ != 0 || static_cast<size_t>(m.first_page) * page_bytes_ != share.size() ||
        share.size() + m.pages.size() > prompt_bytes)
      world_.abort(from + "sent KV pages out of order or of the wrong size", 1);
    share.insert(share.end(), m.pages.begin(), m.pages.end());
    stats_.kv_pages += static_cast<int64_t>(m.pages.size() / page_bytes_);
    stats_.kv_bytes += static_cast<int64_t>(m.pages.size());
  } else {
    if (r.pages[0].size() != prompt_bytes || m.logits.size() != static_cast<size_t>(n_vocab_) || m.n_cached > o.n_tokens)
      world_.abort(from + "finished sequence " + std::to_string(m.seq_id) + " without all of its pages or logits", 1);
    r.logits = std::move(m.logits);
    r.n_cached = m.n_cached;
    o.logits_here = true;
    stats_.prefill_queue_seconds += m.queue_ms / 1e3;
    stats_.prefill_compute_seconds += m.compute_ms / 1e3;
  }
  if (!o.logits_here) return;
  for (const std::vector<uint8_t>& share : r.pages)
    if (share.size() != prompt_bytes) return;  // the other ranks' shares are still on their way
  ++stats_.prompts;
  stats_.prefill_ttft_seconds += clock_.elapsed_s() - o.sent_s;
  queued_tokens_[static_cast<size_t>(o.rank)] -= o.n_tokens;
  done.push_back(std::move(r));
  outstanding_.erase(it);
}

}  // namespace kestrel
