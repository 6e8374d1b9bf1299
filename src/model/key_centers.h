// Key centers for quantized KV pages (KvLayerView::k_center): per layer and KV head, one vector that is
// subtracted from every key before a quantized K type stores it.
//
// Why: keys of trained models carry a large mean in some channels, mostly the slowly turning RoPE pairs
// (stories260K: means of 8-19 against a spread of 1-4 per channel). A per-token scale spends its range on
// that mean, so the part of the key that tells keys apart gets few levels. Softmax ignores a shift shared
// by all of a query's scores, so subtracting one center from every key of a layer and KV head changes no
// attention output, and the page kernels read centered codes as they are. On stories260K this cuts the
// mean KLD of q8_0 K+V pages 3.7x and of q4_0 / tq4 3-4x (docs/kv_cache.md).
//
// Where the centers come from: a calibration forward at load time over 64 fixed token ids spread over the
// vocabulary's ordinary tokens (the mean hardly depends on the text: centers from random letters and from
// the model's own stories cut the key error alike). Each key is turned back by its position (RoPE with
// -p) and averaged over positions 1..63 (position 0 is often an atypical "attention sink" key). RoPE then
// turns that mean with the rotation averaged over where keys sit, taking context lengths log-uniform from
// 64 to the training context: slow pairs keep their mean, pairs that turn often within a short context
// lose it. (A plain average over a fixed context fits that context and misfits others: on stories260K,
// tq4 KLD 0.053 for 256-token chunks with centers for 256 positions, 0.21 with centers for 2048; the
// log-uniform one gives 0.08 from either.) The centers depend only on the model, so pages shared through
// the prefix cache and the pages of every sequence agree.
#pragma once
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_storage.h"
#include "model/model.h"

namespace kestrel {

// [layer][KV heads of the layer][head_dim]; empty for latent attention (its cached row holds the value too, and
// is not centered).
std::vector<float> measure_key_centers(const Model& model, ThreadPool& pool);

// Measures and sets kv's key centers when its K type is quantized and the model caches separate keys;
// otherwise leaves kv as it is. Call before anything is written into kv.
void center_keys(KvStorage& kv, const Model& model, ThreadPool& pool);
// The same with centers measured earlier (measure_key_centers of the same model).
void center_keys(KvStorage& kv, const std::vector<float>& centers);

}  // namespace kestrel
