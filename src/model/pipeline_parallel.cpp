// Model::forward_pipeline and its micro-batch plan (model/pipeline_parallel.h).
#include "model/pipeline_parallel.h"

#include <algorithm>
#include <cstdint>

#include "model/model.h"

namespace kestrel {

std::vector<int> micro_batch_cuts(int n_tok, int n_stages, std::span<const int32_t> logits_rows) {
  int n_micro = std::clamp(n_tok / kMicroBatchMinTokens, 1, std::max(1, n_stages) * kMicroBatchesPerStage);
  if (n_stages <= 1 || !std::is_sorted(logits_rows.begin(), logits_rows.end())) n_micro = 1;
  std::vector<int> cuts(static_cast<size_t>(n_micro) + 1);  // [n_micro + 1]
  for (int m = 0; m <= n_micro; ++m)
    cuts[static_cast<size_t>(m)] = static_cast<int>(static_cast<int64_t>(n_tok) * m / n_micro);
  return cuts;
}

// Each stage runs the micro-batches in order: the first embeds its tokens, the others take the residual
// stream from the stage before; every stage but the last passes it on, the last writes the range's logits
// rows. The whole batch's logits then go from the last stage to all.
void Model::forward_pipeline(ThreadPool& pool, const ModelInput& batch, KvStorage& kv, float* logits,
                             ForwardWorkspace& ws) const {
  using Buffer = ForwardWorkspace::Buffer;
  const int stage = pp_->rank(), last_stage = pp_->size() - 1, E = hparams_.n_embd;
  const std::vector<int> cuts = micro_batch_cuts(batch.n_tokens(), pp_->size(), batch.logits_rows);
  const size_t n_out = batch.logits_rows.size(), n_vocab = static_cast<size_t>(hparams_.n_vocab);
  std::vector<int32_t> rows;  // [rows of this range] its logits rows, counted from its first token
  size_t rows_done = 0;       // logits rows of the earlier ranges
  for (size_t m = 0; m + 1 < cuts.size(); ++m) {
    const int begin = cuts[m], n_tok = cuts[m + 1] - begin;
    rows.clear();
    while (rows_done + rows.size() < n_out && batch.logits_rows[rows_done + rows.size()] < begin + n_tok)
      rows.push_back(batch.logits_rows[rows_done + rows.size()] - begin);
    const ModelInput part{batch.tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(n_tok)),
                          batch.positions.subspan(static_cast<size_t>(begin), static_cast<size_t>(n_tok)),
                          batch.block_tables.subspan(static_cast<size_t>(begin), static_cast<size_t>(n_tok)), rows};
    const size_t n_act = static_cast<size_t>(n_tok) * E;
    float* x = ws.get(Buffer::Residual, n_act);  // [n_tok, n_embd] the range's residual stream
    if (stage == 0) embed(part, x);
    else pp_->recv(x, n_act * sizeof(float), stage - 1);
    run_layers(pool, part, kv, x, ws);
    if (stage != last_stage) pp_->send(x, n_act * sizeof(float), stage + 1);
    else project_logits(pool, part, x, logits + rows_done * n_vocab, ws);
    rows_done += rows.size();
  }
  pp_->broadcast(logits, n_out * n_vocab * sizeof(float), last_stage);
}

}  // namespace kestrel
