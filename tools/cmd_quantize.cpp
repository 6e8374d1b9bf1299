// kestrel quantize: write a model quantized to a scheme with llama.cpp's per-tensor rules, from an F32, F16
// or BF16 GGUF file (model/model_quantizer.h).
//
//   kestrel quantize IN.gguf OUT.gguf TYPE [--pure] [-t N]
//
// Prints a progress bar on a terminal, then a line per tensor (shape, types, sizes, relative RMS error of
// the converted weights) and the totals.
#include <cstdio>

#include "common.h"
#include "core/timer.h"
#include "model/model_quantizer.h"

namespace kestrel::cli {

void add_quantize(CLI::App& app, Action& run) {
  struct Args {
    std::string input, output, type;
    bool pure = false;
    int threads = default_threads();
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a model (llama.cpp's type names and per-tensor rules)");
  cmd->add_option("input", a->input, "Input GGUF (F32, F16 or BF16 weights)")->required();
  cmd->add_option("output", a->output, "Output GGUF")->required();
  cmd->add_option("type", a->type, "Scheme: " + quant_scheme_names())->required();
  cmd->add_flag("--pure", a->pure, "Every quantized tensor of the scheme's base type (no per-tensor rules)");
  cmd->add_option("-t,--threads", a->threads, "Threads")->check(CLI::Range(1, 1024));
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
      ThreadPool pool(a->threads);
      Timer timer;
      auto report = quantize_model({a->input, a->output, *scheme, a->pure}, pool, progress_bar("quantizing"));
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
        if (t.converted) std::printf("  rel. error %.4f", t.rel_error);
        std::printf("\n");
      }
      std::printf("%s: %.2f MiB -> %.2f MiB of tensors, %.2f bits per converted weight, %.1f s\n", scheme->name.c_str(),
                  r.bytes_in / kMiB, r.bytes_out / kMiB, r.bits_per_weight(), timer.elapsed_s());
      return 0;
    };
  });
}

}  // namespace kestrel::cli
