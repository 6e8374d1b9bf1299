// The importance of the token embedding's columns, for the calibrated quantizers (imatrix, gptq, awq).
//
// The embedding is looked up, not multiplied, so calibration measures no input activations for it
// (model/calibration.h). Its rounding error still reaches every layer: an error d_j in residual channel j
// enters the residual stream and each norm that reads the stream passes it on as gamma_j * d_j / rms.
// So the error that the model sees is weighted by gamma_j^2. Here that weight is averaged over the
// residual-stream norms (every layer's attn_norm and ffn_norm, and output_norm). Where some channels have
// norm weights many times the others (the activation outliers of real LLMs, `make-model --outliers`), the
// importance search keeps those channels' embedding values close.
#pragma once
#include "core/status.h"
#include "io/gguf.h"
#include "quant/importance_matrix.h"

namespace kestrel {

// Adds an entry for token_embd.weight to m, one slice of n_embd values: the mean over the residual-stream
// norm weights of gamma_j^2. Does nothing when m already has one (a tied output matrix's measured
// inputs), or when the file has no token_embd or no such norm. Error: a norm whose length is not
// token_embd's row length, or one not stored as F32, F16 or BF16.
Status add_embedding_importance(const GgufFile& file, ImportanceMatrix& m);

}  // namespace kestrel
