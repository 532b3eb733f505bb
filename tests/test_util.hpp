// Test helpers: seeded random buffers and a double-precision
// finite-difference gradient check that reports the first mismatches.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace trident::test {

// A fresh scratch directory (trident_NAME_PID under the temporary
// directory), removed at the end of the test.
struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("trident_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string operator/(const std::string& rel) const { return dir + "/" + rel; }
};

// The trident binary with `args` (a shell command line), stdout and stderr together.
struct CliRun {
  int code;
  std::string out;
};
inline CliRun run_cli(const std::string& binary, const std::string& args) {
  const std::string cmd = binary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

// A checkpoint index.json text as written before indexes were checksummed
// (accepted as such): for tests that edit an index to check one key's message.
// A small file's whole contents ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline std::string without_index_checksum(std::string text) {
  const size_t at = text.rfind(",\"index_crc32c\"");
  return at == std::string::npos ? text : text.substr(0, at) + "}\n";
}

inline std::vector<double> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// An FP8 e4m3fn code's value by the format's definition, the float's bits
// built directly: a normal code keeps its sign, rebiases its exponent (7 ->
// 127) and puts its 3 mantissa bits on top; a subnormal is m x 2^-9. (NaN,
// S.1111.111, is left to the caller.)
inline float fp8_e4m3_by_bits(uint8_t code) {
  const uint32_t sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * float(man) * 0x1p-9f;
  return std::bit_cast<float>(sign << 31 | (exp - 7 + 127) << 23 | man << 20);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic[i] against (f(x + h e_i) - f(x - h e_i)) / 2h for every
// element of x (or `max_checks` evenly spaced ones). f must read x.
inline void expect_fd_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                               const std::function<double()>& f, double tol = 1e-6, size_t max_checks = 64,
                               double h = 1e-5) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  size_t stride = std::max<size_t>(1, x.size() / max_checks);
  double worst = 0;
  size_t worst_i = 0, failures = 0;
  std::string first;
  for (size_t i = 0; i < x.size(); i += stride) {
    double saved = x[i];
    x[i] = saved + h;
    double fp = f();
    x[i] = saved - h;
    double fm = f();
    x[i] = saved;
    double numeric = (fp - fm) / (2 * h);
    double err = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    if (err > worst) worst = err, worst_i = i;
    if (err > tol && failures++ < 5)
      first += "\n  [" + std::to_string(i) + "] analytic " + std::to_string(analytic[i]) + " numeric " +
               std::to_string(numeric);
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " mismatches, max error " << worst << " at " << worst_i
                          << first;
}

}  // namespace trident::test
