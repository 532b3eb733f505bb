// The grouped linear of MoE layers (kernels/grouped_gemm.hpp) against one
// plain linear per group, in double: forward, input and weight gradients,
// accumulation, a group without rows (its weight gradient zeroed, not
// stale), and both schedules (in sequence, across threads) giving the
// reference on 1 and 2 threads.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"

namespace trident::kernels {
namespace {

using V = std::vector<double>;

V randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  V v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_diff(const V& a, const V& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(GroupedGemm, MatchesOneLinearPerGroup) {
  const int64_t G = 5, C = 7, OC = 6;
  const std::vector<int64_t> offsets = {0, 3, 3, 9, 10, 16};  // group 1 has no rows
  const int64_t M = offsets.back();
  const V x = randn(size_t(M * C), 1), w = randn(size_t(G * OC * C), 2), dy = randn(size_t(M * OC), 3);
  V y_ref(size_t(M * OC)), dx_ref(size_t(M * C)), dw_ref(size_t(G * OC * C), 0.0);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[size_t(g)], rows = offsets[size_t(g + 1)] - r0;
    if (rows == 0) continue;
    linear_forward(y_ref.data() + r0 * OC, x.data() + r0 * C, w.data() + g * OC * C,
                   static_cast<const double*>(nullptr), rows, C, OC);
    linear_backward(dx_ref.data() + r0 * C, dw_ref.data() + g * OC * C, static_cast<double*>(nullptr),
                    dy.data() + r0 * OC, x.data() + r0 * C, w.data() + g * OC * C, rows, C, OC, false);
  }
  for (int threads : {1, 2})
    for (GroupedSchedule s : {GroupedSchedule::per_group, GroupedSchedule::across_groups, GroupedSchedule::automatic}) {
      set_num_threads(threads);
      V y(size_t(M * OC)), dx(size_t(M * C)), dw(size_t(G * OC * C), 123.0);  // stale gradients
      grouped_linear_forward(y.data(), x.data(), w.data(), offsets.data(), G, C, OC, Precision::fp32, s);
      grouped_linear_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), offsets.data(), G, C, OC, false,
                              Precision::fp32, s);
      EXPECT_LT(max_diff(y, y_ref), 1e-12) << threads << " threads, schedule " << int(s);
      EXPECT_LT(max_diff(dx, dx_ref), 1e-12);
      EXPECT_LT(max_diff(dw, dw_ref), 1e-12);
      for (int64_t i = OC * C; i < 2 * OC * C; ++i) ASSERT_EQ(dw[size_t(i)], 0.0) << "the empty group";
      // accumulate: a second pass adds the same again
      grouped_linear_backward(static_cast<double*>(nullptr), dw.data(), dy.data(), x.data(), w.data(), offsets.data(),
                              G, C, OC, true, Precision::fp32, s);
      for (size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(dw[i], 2 * dw_ref[i], 1e-12);
    }
  set_num_threads(1);
}

// The experts' biases (gpt-oss): each group's rows take its bias; the
// backward sums each group's rows, a group without rows gets zero (or keeps
// its value when accumulating).
TEST(GroupedGemm, BiasesPerGroup) {
  const int64_t G = 3, OC = 4;
  const std::vector<int64_t> offsets = {0, 2, 2, 5};  // group 1 has no rows
  V y(size_t(5 * OC), 1.0), b(size_t(G * OC)), db(size_t(G * OC), 7.0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = double(i) * 0.5;
  grouped_bias_forward(y.data(), b.data(), offsets.data(), G, OC);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < OC; ++c) EXPECT_EQ(y[size_t(r * OC + c)], 1.0 + b[size_t((r < 2 ? 0 : 2) * OC + c)]);
  grouped_bias_backward(db.data(), y.data(), offsets.data(), G, OC, false);
  for (int64_t c = 0; c < OC; ++c) {
    EXPECT_EQ(db[size_t(c)], y[size_t(c)] + y[size_t(OC + c)]);
    EXPECT_EQ(db[size_t(OC + c)], 0.0);
    EXPECT_EQ(db[size_t(2 * OC + c)], y[size_t(2 * OC + c)] + y[size_t(3 * OC + c)] + y[size_t(4 * OC + c)]);
  }
  const V before = db;
  grouped_bias_backward(db.data(), y.data(), offsets.data(), G, OC, true);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_EQ(db[i], 2 * before[i]);
}

}  // namespace
}  // namespace trident::kernels
