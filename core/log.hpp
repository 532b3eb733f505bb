// Logging: rank-prefixed lines on stdout (info) and stderr (warn, error).
// Only the configured rank prints info unless `all_ranks` is set; warnings and
// errors print on every rank.
#pragma once
#include <fmt/format.h>
#include <string>

namespace trident::log {

void set_rank(int rank, int world);
int rank();
int world();
void write(bool error_stream, const std::string& line);
// Info lines on stderr too: commands whose stdout is their output (sample).
void info_to_stderr(bool on);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (rank() == 0) write(false, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(true, "warning: " + fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(true, "error: " + fmt::format(f, std::forward<Args>(args)...));
}

// "1h02m", "3m05s", "42s" ("?" for a negative or non-finite time).
std::string format_duration(double seconds);

}  // namespace trident::log
