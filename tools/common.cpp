#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/timer.h"

namespace kestrel::cli {

void add_cache_type_options(CLI::App* cmd, KvType& type) {
  static const std::map<std::string, KvType> kTypes{{"f16", KvType::F16}, {"bf16", KvType::BF16}, {"f32", KvType::F32}};
  auto* k = cmd->add_option("--cache-type-k", type, "KV cache element type: f16 (default), bf16 (fastest attention with AVX-512 BF16) or f32")
                ->transform(CLI::CheckedTransformer(kTypes, CLI::ignore_case));
  cmd->add_option("--cache-type-v", type, "Must equal --cache-type-k (K and V share one element type)")
      ->transform(CLI::CheckedTransformer(kTypes, CLI::ignore_case))
      ->excludes(k);
}

int default_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::function<void(double)> progress_bar(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return {};
  return [label, last = -1](double fraction) mutable {
    const int percent = static_cast<int>(fraction * 100);
    if (percent == last) return;
    last = percent;
    const int filled = percent * 30 / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%%", label.c_str(), std::string(filled, '#').c_str(),
                 std::string(30 - filled, ' ').c_str(), percent);
    if (percent >= 100) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

std::unique_ptr<Model> load_model(const std::string& path, bool quiet) {
  Timer timer;
  auto model = Model::load(path, quiet ? std::function<void(double)>() : progress_bar("loading"));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return nullptr;
  }
  if (!quiet) std::fprintf(stderr, "load time: %.3f s\n", timer.elapsed_s());
  return std::move(model).value();
}

bool read_text_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read '%s'\n", path.c_str());
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace kestrel::cli
