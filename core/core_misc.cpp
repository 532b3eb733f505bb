// Small core pieces: Device parsing, error formatting, logging.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace trident {

std::optional<Device> Device::parse(const std::string& s) {
  if (s == "cpu") return Device{DeviceType::cpu, 0};
  if (s == "cuda") return Device{DeviceType::cuda, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    int idx = 0;
    for (char c : s.substr(5)) {
      if (c < '0' || c > '9') return std::nullopt;
      idx = idx * 10 + (c - '0');
    }
    return Device{DeviceType::cuda, idx};
  }
  return std::nullopt;
}

std::string Device::str() const { return type == DeviceType::cpu ? "cpu" : fmt::format("cuda:{}", index); }

void throw_check_failure(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("check `{}` failed at {}:{}: {}", cond, file, line, msg));
}

void throw_library_failure(const char* library, const char* stmt, const char* file, int line,
                           const std::string& message) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  throw Error(fmt::format("{} error in `{}` at {}:{} on rank {} ({}): {}", library, stmt, file, line, log::rank(), host,
                          message));
}

namespace log {
namespace {
int g_rank = 0;
int g_world = 1;
std::mutex g_mutex;
}  // namespace

void set_rank(int r, int w) {
  g_rank = r;
  g_world = w;
}
int rank() { return g_rank; }
int world() { return g_world; }

namespace {
bool g_info_stderr = false;
}
void info_to_stderr(bool on) { g_info_stderr = on; }

void write(bool error_stream, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* f = error_stream || g_info_stderr ? stderr : stdout;
  if (g_world > 1)
    fmt::print(f, "[rank {}] {}\n", g_rank, line);
  else
    fmt::print(f, "{}\n", line);
  std::fflush(f);
}
std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace log

}  // namespace trident
