// kestrel make-model: write a random-weight GGUF model of a given architecture, shape and weight type.
#include <cstdio>

#include "common.h"
#include "core/timer.h"
#include "model/model_maker.h"

namespace kestrel::cli {

void add_make_model(CLI::App& app, Action& run) {
  struct Args {
    MakeModelOptions options;
    std::string output, preset, draft_output;
    int draft_layers = 2;
  };
  auto a = std::make_shared<Args>();
  ModelShape& s = a->options.shape;
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight model (for tests and benchmarks)");
  cmd->add_option("-o,--output", a->output, "Output GGUF path")->required();
  cmd->add_option("--preset", a->preset, "Shape preset: tinyllama (TinyLlama-1.1B shape), tiny");
  cmd->add_option("--arch", s.arch, "Architecture: llama, qwen2, qwen3, qwen3moe");
  cmd->add_option("--type", a->options.weight_type, "Weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k fp8_e4m3, the 2:4 sparse s24_f16 s24_q8 s24_q4, or a mixture q3_k_m q4_k_m q5_k_m");
  cmd->add_option("--dim", s.n_embd, "Embedding width")->check(CLI::Range(8, 65536));
  cmd->add_option("--layers", s.n_layers, "Layers")->check(CLI::Range(1, 1024));
  cmd->add_option("--heads", s.n_heads, "Attention heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", s.n_kv_heads, "KV heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ffn", s.n_ff, "FFN width")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab", s.n_vocab, "Vocabulary size")->check(CLI::Range(300, 1 << 20));
  cmd->add_option("--vocab-from", a->options.vocab_from,
                  "Take the tokenizer (and the vocabulary size) from this GGUF file, e.g. llama.cpp's ggml-vocab-*.gguf")
      ->check(CLI::ExistingFile);
  cmd->add_option("--ctx", s.n_ctx, "Training context length")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--experts", s.n_expert, "Experts (MoE; 0: dense)")->check(CLI::Range(0, 1024));
  cmd->add_option("--experts-used", s.n_expert_used, "Experts per token")->check(CLI::Range(0, 1024));
  cmd->add_flag("--tied", s.tied_output, "Share token_embd as the output matrix");
  cmd->add_option("--seed", a->options.seed, "Random seed");
  cmd->add_option("--draft-output", a->draft_output,
                  "Also write a draft model for speculative decoding: the first --draft-layers layers of this one, "
                  "whose later layers' output projections are scaled by --perturb");
  cmd->add_option("--draft-layers", a->draft_layers, "Layers of the draft model")->check(CLI::Range(1, 1024));
  cmd->add_option("--perturb", a->options.perturb_scale,
                  "Scale of the target's layers past the draft's (smaller: the draft agrees more often)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--outliers", a->options.outlier_channels,
                  "Activation-outlier channels: this many residual-stream channels get --outlier-scale times larger "
                  "attn_norm / ffn_norm weights")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--outlier-scale", a->options.outlier_scale, "Norm-weight factor of the outlier channels")
      ->check(CLI::Range(1.0, 1e4));
  cmd->add_flag("--fan-in-init", a->options.fan_in_init,
                "Matrices' random values with standard deviation 1/sqrt(row length) instead of 0.05: wide, deep "
                "models stop being chaotic, so quantization errors stay measurable");
  cmd->callback([&run, a, cmd] {
    run = [a, cmd] {
      if (!a->preset.empty()) {
        MakeModelOptions base = a->options;
        if (!preset_shape(a->preset, a->options.shape)) {
          std::fprintf(stderr, "error: unknown preset '%s'\n", a->preset.c_str());
          return 1;
        }
        a->options.shape.arch = base.shape.arch;  // presets fix the shape; --arch still applies
      }
      if (!a->options.vocab_from.empty()) {
        auto source = GgufFile::open(a->options.vocab_from);
        const GgufValue* tokens = source.ok() ? source->find("tokenizer.ggml.tokens") : nullptr;
        if (!tokens || !tokens->is_array()) {
          std::fprintf(stderr, "error: %s: %s\n", a->options.vocab_from.c_str(),
                       source.ok() ? "no tokenizer.ggml.tokens" : source.error().c_str());
          return 1;
        }
        a->options.shape.n_vocab = static_cast<int32_t>(tokens->array_size());
      }
      if (!a->draft_output.empty()) {
        if (a->draft_layers >= a->options.shape.n_layers) {
          std::fprintf(stderr, "error: --draft-layers must be fewer than the model's %d layers\n", a->options.shape.n_layers);
          return 1;
        }
        a->options.perturb_from_layer = a->draft_layers;
      }
      const auto write = [](const MakeModelOptions& options, const std::string& path) {
        Timer timer;
        auto st = make_model(options, path, progress_bar("writing"));
        if (!st.ok()) {
          std::fprintf(stderr, "error: %s\n", st.error().c_str());
          return false;
        }
        std::fprintf(stderr, "wrote %s in %.1f s\n", path.c_str(), timer.elapsed_s());
        return true;
      };
      if (!write(a->options, a->output)) return 1;
      if (a->draft_output.empty()) return 0;
      MakeModelOptions draft = a->options;
      draft.shape.n_layers = a->draft_layers;
      draft.perturb_from_layer = -1;
      return write(draft, a->draft_output) ? 0 : 1;
    };
  });
}

}  // namespace kestrel::cli
