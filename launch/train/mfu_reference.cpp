// The MFU reference (launch/train/run_report.hpp: mfu_reference): the
// recipe's log.peak_flops, the GPU's dense peak, or this machine's best
// measured CPU GEMM rate, cached per CPU, thread count, backend and math.
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "launch/train/run_report.hpp"

namespace trident::launch {

using Json = nlohmann::ordered_json;

std::string peak_cache_file() {
  if (const char* dir = std::getenv("TRIDENT_CACHE_DIR"); dir && *dir) return std::string(dir) + "/gemm_peak.json";
  if (const char* dir = std::getenv("XDG_CACHE_HOME"); dir && *dir) return std::string(dir) + "/trident/gemm_peak.json";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/trident/gemm_peak.json";
  return "";
}

namespace {

// This machine's CPU, as /proc/cpuinfo names it.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}

// The cached peaks: {"CPU | N threads | backend": {"flops": F, "measured": DATE}}.
Json read_peak_cache(const std::string& file) {
  std::ifstream in(file);
  if (!in) return Json::object();
  try {
    Json j = Json::parse(in);
    return j.is_object() ? j : Json::object();
  } catch (const Json::exception&) {
    return Json::object();  // a damaged cache is measured again and rewritten
  }
}

}  // namespace

void cache_gemm_peak(const std::string& key, double flops) {
  const std::string file = peak_cache_file();
  if (file.empty()) return;
  try {
    Json j = read_peak_cache(file);
    if (j.contains(key) && j[key].value("flops", 0.0) >= flops) return;
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char when[32];
    std::strftime(when, sizeof(when), "%Y-%m-%d", std::gmtime(&now));
    j[key] = {{"flops", flops}, {"measured", when}};
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    write_file_atomic(file, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    log::warn("{}: could not cache the GEMM peak ({})", file, e.what());
  }
}

std::pair<double, std::string> mfu_reference(const Recipe& rc, Device device, std::string* cache_key) {
  if (rc.log.peak_flops > 0) return {rc.log.peak_flops, "log.peak_flops"};
  const Precision p = rc.train.precision;
  if (device.type == DeviceType::cuda)
    return {kernels::cuda_peak_flops(p), fmt::format("dense {} peak of cuda:{}", p, device.index)};
  // CPU: the best sgemm ever measured on this machine with this many threads
  // (cached: a figure measured once, not under whatever load start-up meets)
  const std::string what = p == Precision::bf16 ? "bf16 GEMM" : "sgemm";
  const std::string key =
      fmt::format("{} | {} threads | {} | {}", cpu_model(), kernels::num_threads(), kernels::cpu_gemm_backend(), what);
  if (cache_key) *cache_key = key;
  const std::string file = peak_cache_file();
  const Json cache = file.empty() ? Json::object() : read_peak_cache(file);
  if (cache.contains(key) && cache[key].value("flops", 0.0) > 0)
    return {cache[key]["flops"].get<double>(),
            fmt::format("{} measured {}, cached in {}", what, cache[key].value("measured", "?"), file)};
  const double measured = kernels::measure_gemm_peak();
  cache_gemm_peak(key, measured);
  return {measured, "measured " + what};
}

}  // namespace trident::launch
