// kestrel quantize: write a model quantized to a scheme with llama.cpp's per-tensor rules, from an F32, F16
// or BF16 GGUF file (model/model_quantizer.h).
//
//   kestrel quantize IN.gguf OUT.gguf TYPE [--pure] [-t N] [--calib TEXT [--method imatrix|gptq|awq] [-c 512]
//                    [--calib-chunks N] [--imatrix-out FILE] [--gptq-damp 0.01] [--gptq-act-order]]
//                    [--imatrix FILE]
//   kestrel quantize IN.gguf OUT.gguf W8A8 [--calib TEXT [--method smoothquant|rtn] [--smooth-alpha 0.5]
//                    [--outlier-threshold T] [--static-scales]]
//
// --method rtn (the default without --calib) rounds each block to nearest; imatrix (the default with
// --calib) first runs the model over the calibration text to measure each matrix's input channels
// (model/calibration.h) and fits every block to the importance-weighted error; gptq measures each matrix
// input's Hessian instead and quantizes block-format tensors by GPTQ (quant/gptq.h); awq measures the
// Hessians too, searches activation-aware channel scales and folds them into the model (model/awq_fold.h).
// W8A8 (model/w8a8_quantizer.h): int8 weights and activations; --method rtn is naive W8A8, smoothquant (the
// default with --calib) migrates activation outliers into the weights first; --outlier-threshold T keeps
// input channels whose calibrated max|x| reaches T times the median channel's in F16 (LLM.int8's
// decomposition; at most 1/32 of the channels); --static-scales calibrates one
// activation scale per matrix instead of one per token.
// --imatrix FILE takes the importance from a file in llama.cpp's imatrix format instead of calibrating;
// --imatrix-out FILE saves what calibration measured in that format (quant/importance_matrix.h).
// Prints progress bars on a terminal, then a line per tensor (shape, types, sizes, relative RMS error of
// the converted weights) and the totals.
#include <cstdio>
#include <map>

#include "common.h"
#include "core/timer.h"
#include "io/gguf.h"
#include "model/calibration.h"
#include "model/model_quantizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct QuantizeArgs {
  std::string input, output, type, calib_file, method, imatrix_in, imatrix_out;
  bool pure = false;
  int threads = default_threads();
  int calib_ctx = 512, calib_chunks = 0;
  GptqOptions gptq;
  float smooth_alpha = 0.5f, outlier_threshold = 0.0f;
  bool static_scales = false;
};

// Runs the input model over the calibration text: the importance matrix (imatrix), or the input Hessians and
// the importance their diagonals give (gptq).
bool calibrate(const QuantizeArgs& a, const std::string& method, ThreadPool& pool, ImportanceMatrix& importance,
               HessianSet& hessians) {
  auto model = load_model(a.input, true);
  if (!model) return false;
  const auto chunks = calibration_chunks(*model, a.calib_file, a.calib_ctx, a.calib_chunks);
  if (chunks.empty()) return false;
  Timer timer;
  if (method == "gptq" || method == "awq") {
    auto measured = collect_hessians(*model, pool, chunks, progress_bar("calibrating"));
    if (!measured.ok()) {
      std::fprintf(stderr, "error: %s\n", measured.error().c_str());
      return false;
    }
    hessians = std::move(measured).value();
    importance = importance_from_hessians(hessians);
  } else {
    auto measured = collect_importance(*model, pool, chunks, progress_bar("calibrating"));
    if (!measured.ok()) {
      std::fprintf(stderr, "error: %s\n", measured.error().c_str());
      return false;
    }
    importance = std::move(measured).value();
  }
  size_t n_tokens = 0;
  for (const auto& c : chunks) n_tokens += c.size();
  std::fprintf(stderr, "calibration: %zu chunks, %zu tokens, %zu matrices measured in %.1f s", chunks.size(), n_tokens,
               importance.tensors.size(), timer.elapsed_s());
  if (!hessians.tensors.empty()) std::fprintf(stderr, " (Hessians: %.1f MiB)", static_cast<double>(hessians.bytes()) / (1024.0 * 1024.0));
  std::fprintf(stderr, "\n");
  if (!a.imatrix_out.empty()) {
    if (Status w = write_imatrix_file(importance, static_cast<int32_t>(chunks.size()), a.calib_file, a.imatrix_out); !w.ok()) {
      std::fprintf(stderr, "error: %s\n", w.error().c_str());
      return false;
    }
    std::fprintf(stderr, "importance matrix written to %s (llama.cpp's imatrix format)\n", a.imatrix_out.c_str());
  }
  return true;
}

}  // namespace

void add_quantize(CLI::App& app, Action& run) {
  using Args = QuantizeArgs;
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a model (llama.cpp's type names and per-tensor rules)");
  cmd->add_option("input", a->input, "Input GGUF (F32, F16 or BF16 weights)")->required();
  cmd->add_option("output", a->output, "Output GGUF")->required();
  cmd->add_option("type", a->type, "Scheme: " + quant_scheme_names())->required();
  cmd->add_flag("--pure", a->pure, "Every quantized tensor of the scheme's base type (no per-tensor rules)");
  cmd->add_option("-t,--threads", a->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--calib", a->calib_file, "Calibration text (plain text, tokenized by the model)");
  cmd->add_option("--method", a->method,
                  "rtn (round to nearest), imatrix (importance-weighted), gptq (error compensation through the "
                  "inverse Hessian) awq (activation-aware channel scales) or, for W8A8, smoothquant; all but rtn need --calib")
      ->check(CLI::IsMember({"rtn", "imatrix", "gptq", "awq", "smoothquant"}));
  cmd->add_option("--imatrix", a->imatrix_in, "Importance matrix file (llama.cpp's imatrix format) for --method imatrix, instead of --calib");
  cmd->add_option("--imatrix-out", a->imatrix_out, "Write the importance matrix calibration measured (llama.cpp's imatrix format)");
  cmd->add_option("--gptq-damp", a->gptq.damp, "GPTQ damping: fraction of the Hessian's mean diagonal added to it")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_flag("--gptq-act-order", a->gptq.act_order, "GPTQ: quantize columns in order of decreasing activation energy");
  cmd->add_option("--smooth-alpha", a->smooth_alpha, "W8A8 SmoothQuant: migration strength alpha")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--outlier-threshold", a->outlier_threshold,
                  "W8A8: input channels whose calibrated max|x| reaches this times the median channel's stay in F16 (LLM.int8)")
      ->check(CLI::Range(0.0, 1e30));
  cmd->add_flag("--static-scales", a->static_scales, "W8A8: calibrated activation scale per matrix instead of per token");
  cmd->add_option("-c,--calib-ctx", a->calib_ctx, "Tokens per calibration chunk")->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--calib-chunks", a->calib_chunks, "Use at most this many chunks (0: all)")->check(CLI::Range(0, 1 << 20));
  cmd->callback([&run, a] {
    run = [a] {
      const auto scheme = find_quant_scheme(a->type);
      if (!scheme) {
        std::fprintf(stderr, "error: unknown type '%s' (known: %s)\n", a->type.c_str(), quant_scheme_names().c_str());
        return 1;
      }
      if (a->input == a->output) {
        std::fprintf(stderr, "error: the output would overwrite the input\n");
        return 1;
      }
      const bool measured = !a->calib_file.empty(), given = !a->imatrix_in.empty();
      const bool w8a8 = scheme->base == DType::I8;
      const std::string method = !a->method.empty() ? a->method
                                 : measured          ? (w8a8 ? "smoothquant" : "imatrix")
                                 : given             ? "imatrix"
                                                     : "rtn";
      if (w8a8 != (method == "smoothquant") && method != "rtn") {
        std::fprintf(stderr, "error: --method %s %s\n", method.c_str(), w8a8 ? "does not apply to W8A8 (rtn or smoothquant)" : "applies to W8A8 only");
        return 1;
      }
      if (w8a8 && !measured && (method == "smoothquant" || a->outlier_threshold > 0 || a->static_scales)) {
        std::fprintf(stderr, "error: W8A8 with smoothquant, --outlier-threshold or --static-scales needs --calib TEXT\n");
        return 1;
      }
      if ((method == "imatrix" && !measured && !given) || ((method == "gptq" || method == "awq") && !measured)) {
        std::fprintf(stderr, "error: --method %s needs --calib TEXT%s\n", method.c_str(), method == "imatrix" ? " or --imatrix FILE" : "");
        return 1;
      }
      if (given && (measured || method != "imatrix")) {
        std::fprintf(stderr, "error: --imatrix FILE goes with --method imatrix and without --calib\n");
        return 1;
      }
      ThreadPool pool(a->threads);
      Timer timer;
      ImportanceMatrix importance;
      HessianSet hessians;
      if (given && !load_imatrix(a->imatrix_in, a->input, importance)) return 1;
      if (measured && !calibrate(*a, method, pool, importance, hessians)) return 1;
      QuantizeOptions options{a->input, a->output, *scheme, a->pure};
      options.method = method == "imatrix" ? QuantMethod::Importance
                       : method == "gptq"  ? QuantMethod::Gptq
                       : method == "awq"   ? QuantMethod::Awq
                                           : QuantMethod::RoundToNearest;
      if (method != "rtn" || (w8a8 && measured)) options.importance = &importance;
      if (w8a8) {
        options.method = method == "smoothquant" ? QuantMethod::SmoothQuant : QuantMethod::W8A8;
        options.smooth_alpha = method == "smoothquant" ? a->smooth_alpha : -1.0f;
        options.outlier_threshold = a->outlier_threshold;
        options.static_scales = a->static_scales;
      }
      if (method == "gptq" || method == "awq") options.hessians = &hessians;
      options.gptq = a->gptq;
      auto report = quantize_model(options, pool, progress_bar("quantizing"));
      if (!report.ok()) {
        std::fprintf(stderr, "error: %s\n", report.error().c_str());
        return 1;
      }
      const QuantizeReport& r = report.value();
      constexpr double kMiB = 1024.0 * 1024.0;
      for (size_t i = 0; i < r.tensors.size(); ++i) {
        const TensorQuantReport& t = r.tensors[i];
        std::printf("[%4zu/%4zu] %-36s %-20s %5s -> %-5s %9.2f MiB -> %8.2f MiB", i + 1, r.tensors.size(), t.name.c_str(),
                    t.shape.c_str(), dtype_name(t.from), dtype_name(t.to), t.bytes_in / kMiB, t.bytes_out / kMiB);
        if (t.converted) std::printf("  rel. error %.4f (%s)", t.rel_error, quant_method_name(t.method));
        std::printf("\n");
      }
      for (const AwqGroupReport& g : r.awq_groups)
        std::printf("awq %-28s alpha %.2f  output error %.3g -> %.3g\n", g.matrices.c_str(), g.alpha, g.error_before, g.error_after);
      std::printf("%s: %.2f MiB -> %.2f MiB of tensors, %.2f bits per converted weight, %.1f s\n", scheme->name.c_str(),
                  r.bytes_in / kMiB, r.bytes_out / kMiB, r.bits_per_weight(), timer.elapsed_s());
      return 0;
    };
  });
}

}  // namespace kestrel::cli
