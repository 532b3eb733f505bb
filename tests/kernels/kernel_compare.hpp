// Helpers of the CUDA twin tests (test_cuda, test_cuda_emulated): float
// random data and the comparison that prints the largest difference and the
// first elements.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace trident::test {

using F = std::vector<float>;

// Document masking's doc_start[B*T] for documents starting at `starts[b]` of each sequence.
inline std::vector<int32_t> doc_starts(int64_t B, int64_t T, const std::vector<std::vector<int64_t>>& starts) {
  std::vector<int32_t> ds(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s : starts[size_t(b)])
        if (s <= t) ds[size_t(b * T + t)] = int32_t(s);
  return ds;
}

inline F randn_f(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, scale);
  F v(static_cast<size_t>(n));
  for (auto& x : v) x = d(gen);
  return v;
}

// Mixture-of-experts routes expert[N,k]: k distinct experts per token in
// increasing id, drawn from the first E - 2 so the last two get no rows.
inline std::vector<int32_t> moe_routes(int64_t N, int64_t K, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(E - 2)), expert;
  for (int64_t n = 0; n < N; ++n) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::sort(ids.begin(), ids.begin() + K);
    expert.insert(expert.end(), ids.begin(), ids.begin() + K);
  }
  return expert;
}

// max |cpu - other| <= atol + rtol * max |cpu| over the buffer
inline void expect_close(const std::string& what, const F& cpu, const F& other, double rtol, double atol = 0) {
  ASSERT_EQ(cpu.size(), other.size()) << what;
  double worst = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double d = std::abs(double(cpu[i]) - double(other[i]));
    if (!(d <= worst)) worst = d, at = i;  // NaN counts as worst
    scale = std::max(scale, std::abs(double(cpu[i])));
  }
  const double tol = atol + rtol * scale;
  if (!(worst <= tol)) {
    std::ostringstream s;
    s << what << ": max |cpu - kernel| = " << worst << " at " << at << " (cpu " << cpu[at] << ", kernel " << other[at]
      << "), tolerance " << tol << "; first elements:";
    for (size_t i = 0; i < std::min<size_t>(cpu.size(), 6); ++i) s << " (" << cpu[i] << ", " << other[i] << ")";
    ADD_FAILURE() << s.str();
  }
}

}  // namespace trident::test
