// kestrel prune: write a pruned model (model/model_pruner.h) from an F32, F16 or BF16 GGUF file.
//
//   kestrel prune IN.gguf OUT.gguf [--method magnitude|wanda]
//                 [--sparsity S | --pattern 2:4 | --structured heads=H,kv=K,ffn=F[,budget=layer|global]]
//                 [--type SCHEME] [--calib TEXT [-c 512] [--calib-chunks N] | --imatrix FILE] [-t N]
//
// --method magnitude (the default without calibration) zeroes the weights of least |w| of each matrix;
// wanda (the default with --calib or --imatrix) the least |w| x the norm of the weight's input channel,
// compared within each output row. --sparsity S prunes that fraction (unstructured); --pattern 2:4 keeps
// 2 of every 4 consecutive weights of a row, written as S24_F16 (half the bytes, read by the sparse
// kernels) unless --type names another scheme (S24_Q8, S24_Q4, or any `kestrel quantize` type).
// --structured removes whole query heads (evenly per KV group), KV groups and FFN channels, scored by the
// output energy they carry (with calibration) or their weights alone (magnitude), the same fraction of
// every layer or (budget=global) of the whole model; the result is a smaller dense model
// (model/structured_pruner.h).
// Prints progress bars on a terminal, then a line per tensor (shape, types, sizes, the zeros' fraction, the
// relative RMS error of the written weights and, with calibration, of the layer's output) and the totals.
#include <cstdio>

#include "common.h"
#include "core/timer.h"
#include "model/calibration.h"
#include "model/model_pruner.h"

namespace kestrel::cli {
namespace {

struct PruneArgs {
  std::string input, output, method, pattern, structured, type, calib_file, imatrix_in;
  double sparsity = -1.0;
  int threads = default_threads();
  int calib_ctx = 512, calib_chunks = 0;
};

// The importance (mean square per input channel) of every matrix, measured over the calibration text.
bool calibrate(const PruneArgs& a, ThreadPool& pool, ImportanceMatrix& importance) {
  auto model = load_model(a.input, true);
  if (!model) return false;
  const auto chunks = calibration_chunks(*model, a.calib_file, a.calib_ctx, a.calib_chunks);
  if (chunks.empty()) return false;
  Timer timer;
  auto measured = collect_importance(*model, pool, chunks, progress_bar("calibrating"));
  if (!measured.ok()) {
    std::fprintf(stderr, "error: %s\n", measured.error().c_str());
    return false;
  }
  importance = std::move(measured).value();
  std::fprintf(stderr, "calibration: %zu chunks, %zu matrices measured in %.1f s\n", chunks.size(), importance.tensors.size(),
               timer.elapsed_s());
  return true;
}

int run_prune(const PruneArgs& a) {
  PruneOptions options;
  options.input = a.input;
  options.output = a.output;
  const bool calibrated = !a.calib_file.empty() || !a.imatrix_in.empty();
  if (!a.calib_file.empty() && !a.imatrix_in.empty()) {
    std::fprintf(stderr, "error: give --calib TEXT or --imatrix FILE, not both\n");
    return 1;
  }
  const std::string method = !a.method.empty() ? a.method : calibrated ? "wanda" : "magnitude";
  options.spec.method = method == "wanda" ? PruneMethod::Wanda : PruneMethod::Magnitude;
  if (options.spec.method == PruneMethod::Wanda && !calibrated) {
    std::fprintf(stderr, "error: --method wanda needs --calib TEXT or --imatrix FILE\n");
    return 1;
  }
  if (!a.structured.empty()) {
    if (!a.pattern.empty() || a.sparsity >= 0) {
      std::fprintf(stderr, "error: --structured removes whole heads and channels; drop --sparsity / --pattern\n");
      return 1;
    }
    auto spec = parse_structured_spec(a.structured);
    if (!spec.ok()) {
      std::fprintf(stderr, "error: %s\n", spec.error().c_str());
      return 1;
    }
    options.structured = spec.value();
  } else if (a.pattern == "2:4") {
    if (a.sparsity >= 0 && a.sparsity != 0.5) {
      std::fprintf(stderr, "error: --pattern 2:4 prunes half the weights; drop --sparsity\n");
      return 1;
    }
    options.spec.pattern = PrunePattern::TwoFour;
  } else if (a.sparsity < 0) {
    std::fprintf(stderr, "error: give --sparsity S (0 <= S < 1), --pattern 2:4 or --structured heads=H,ffn=F\n");
    return 1;
  } else {
    options.spec.sparsity = a.sparsity;
  }
  if (!a.type.empty()) {
    options.scheme = find_quant_scheme(a.type);
    if (!options.scheme || options.scheme->base == DType::I8) {
      std::fprintf(stderr, "error: unknown type '%s' (known: %s; not W8A8)\n", a.type.c_str(), quant_scheme_names().c_str());
      return 1;
    }
  }
  if (a.input == a.output) {
    std::fprintf(stderr, "error: the output would overwrite the input\n");
    return 1;
  }
  ThreadPool pool(a.threads);
  Timer timer;
  ImportanceMatrix importance;
  if (!a.imatrix_in.empty() && !load_imatrix(a.imatrix_in, a.input, importance)) return 1;
  if (!a.calib_file.empty() && !calibrate(a, pool, importance)) return 1;
  if (calibrated) options.importance = &importance;
  auto report = prune_model(options, pool, progress_bar("pruning"));
  if (!report.ok()) {
    std::fprintf(stderr, "error: %s\n", report.error().c_str());
    return 1;
  }
  const PruneReport& r = report.value();
  constexpr double kMiB = 1024.0 * 1024.0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorPruneReport& t = r.tensors[i];
    std::printf("[%4zu/%4zu] %-36s %-20s %7s -> %-7s %9.2f MiB -> %8.2f MiB", i + 1, r.tensors.size(), t.name.c_str(),
                t.shape.c_str(), dtype_name(t.from), dtype_name(t.to), t.bytes_in / kMiB, t.bytes_out / kMiB);
    if (t.pruned && options.structured) {
      std::printf("  %5.1f%% removed, %.4f of its energy", 100.0 * t.sparsity, t.rel_error * t.rel_error);
      if (t.rel_output_error >= 0) std::printf(", output %.4f", t.rel_output_error * t.rel_output_error);
    } else if (t.pruned) {
      std::printf("  %5.1f%% zero, rel. error %.4f", 100.0 * t.sparsity, t.rel_error);
      if (t.rel_output_error >= 0) std::printf(", output %.4f", t.rel_output_error);
      if (options.spec.method == PruneMethod::Wanda && !t.by_activations) std::printf(" (no calibration input: by magnitude)");
    }
    std::printf("\n");
  }
  const std::string pattern = options.structured ? "structured " + to_string(*options.structured)
                              : options.spec.pattern == PrunePattern::TwoFour ? "2:4" : "unstructured";
  std::printf("%s %s: %.2f MiB -> %.2f MiB of tensors, %.1f%% of the %s weights %s, %.1f s\n",
              method.c_str(), pattern.c_str(), r.bytes_in / kMiB,
              r.bytes_out / kMiB, r.pruned_weights ? 100.0 * static_cast<double>(r.zero_weights) / static_cast<double>(r.pruned_weights) : 0.0,
              options.structured ? "block matrices'" : "pruned matrices'", options.structured ? "removed" : "zero", timer.elapsed_s());
  return 0;
}

}  // namespace

void add_prune(CLI::App& app, Action& run) {
  auto a = std::make_shared<PruneArgs>();
  CLI::App* cmd = app.add_subcommand("prune", "Prune a model: magnitude or Wanda, unstructured, 2:4 (sparse kernels) or structured (heads, FFN channels)");
  cmd->add_option("input", a->input, "Input GGUF (F32, F16 or BF16 weights)")->required();
  cmd->add_option("output", a->output, "Output GGUF")->required();
  cmd->add_option("--method", a->method, "magnitude (|w| per matrix) or wanda (|w| x input norm per row; needs --calib or --imatrix)")
      ->check(CLI::IsMember({"magnitude", "wanda"}));
  cmd->add_option("--sparsity", a->sparsity, "Fraction of each matrix's weights to zero (unstructured)")->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--pattern", a->pattern, "2:4: keep 2 of every 4 consecutive weights (written S24_F16 unless --type)")
      ->check(CLI::IsMember({"2:4"}));
  cmd->add_option("--structured", a->structured,
                  "Remove whole units: heads=H (query heads, evenly per KV group), kv=K (KV groups), ffn=F (FFN channels), "
                  "budget=layer|global; writes a smaller dense model");
  cmd->add_option("--type", a->type, "Write the types of this scheme: S24_F16, S24_Q8, S24_Q4, or " + quant_scheme_names());
  cmd->add_option("--calib", a->calib_file, "Calibration text (plain text, tokenized by the model)");
  cmd->add_option("--imatrix", a->imatrix_in, "Importance matrix file (llama.cpp's imatrix format) instead of --calib");
  cmd->add_option("-c,--calib-ctx", a->calib_ctx, "Tokens per calibration chunk")->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--calib-chunks", a->calib_chunks, "Use at most this many chunks (0: all)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", a->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->callback([&run, a] { run = [a] { return run_prune(*a); }; });
}

}  // namespace kestrel::cli
