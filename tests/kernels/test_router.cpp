// The mixture-of-experts router (kernels/router.hpp): the choice and the
// weights of every router kind against the formulas written out here, a
// DeepSeek-V3-style case worked by hand (groups, the correction bias used
// for choosing only, renormalisation, scaling), ties to the lower id, the
// backward against finite differences, the same bits on 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "kernels/router.hpp"
#include "tests/test_util.hpp"

namespace trident::kernels {
namespace {

using test::dot;
using test::expect_fd_gradient;
using test::randn;
using V = std::vector<double>;

struct Routed {
  std::vector<int32_t> expert;
  V weight, scores;
};

Routed route(const V& logits, const V* bias, int64_t N, const RouterSpec& s) {
  Routed r{std::vector<int32_t>(size_t(N * s.top_k)), V(size_t(N * s.top_k)), V(logits.size())};
  router_forward(r.expert.data(), r.weight.data(), r.scores.data(), logits.data(), bias ? bias->data() : nullptr, N, s);
  return r;
}

double logit(double p) { return std::log(p / (1 - p)); }

// The plain softmax router of transformers' Mixtral / Qwen3-MoE, one row:
// softmax, a full sort (score descending, id ascending), the top k.
void softmax_reference(const double* l, int64_t E, int64_t k, bool norm, std::vector<int32_t>& ids, V& w) {
  V p(static_cast<size_t>(E));
  double top = *std::max_element(l, l + E), sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += p[size_t(e)] = std::exp(l[e] - top);
  for (auto& x : p) x /= sum;
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  ids.assign(order.begin(), order.begin() + k);
  std::sort(ids.begin(), ids.end());
  double chosen = 0;
  for (int32_t e : ids) chosen += p[size_t(e)];
  w.clear();
  for (int32_t e : ids) w.push_back(norm ? p[size_t(e)] / chosen : p[size_t(e)]);
}

TEST(Router, SoftmaxTopKAsTransformers) {
  const int64_t N = 37, E = 8, k = 2;
  const V logits = randn(size_t(N * E), 11, 2.0);
  for (bool norm : {false, true}) {
    const RouterSpec s{.experts = E, .top_k = k, .norm_topk = norm};
    const Routed r = route(logits, nullptr, N, s);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<int32_t> ids;
      V w;
      softmax_reference(logits.data() + n * E, E, k, norm, ids, w);
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(r.expert[size_t(n * k + j)], ids[size_t(j)]) << "row " << n << " norm " << norm;
        EXPECT_NEAR(r.weight[size_t(n * k + j)], w[size_t(j)], 1e-15) << "row " << n << " norm " << norm;
      }
      // Mixtral: renormalised top-k softmax = the softmax of the chosen logits alone
      if (norm) {
        double z = 0;
        for (int32_t e : ids) z += std::exp(logits[size_t(n * E + e)]);
        for (int64_t j = 0; j < k; ++j)
          EXPECT_NEAR(r.weight[size_t(n * k + j)], std::exp(logits[size_t(n * E + ids[size_t(j)])]) / z, 1e-14);
      }
    }
  }
}

// Eight experts in four groups of two, keep two groups, choose three:
// expert 0 has the highest score of all but its group loses.
TEST(Router, SigmoidGroupsBiasScalingWorkedByHand) {
  const V p = {0.9, 0.1, 0.5, 0.6, 0.75, 0.7, 0.2, 0.3}, bias = {0, 0, 0.3, 0, 0, 0, 0, 0};
  V logits;
  for (double x : p) logits.push_back(logit(x));
  const RouterSpec s{.experts = 8,
                     .top_k = 3,
                     .score = RouterScore::sigmoid,
                     .norm_topk = true,
                     .groups = 4,
                     .group_topk = 2,
                     .scaling = 2.5};
  // with the bias: groups {0,1} 1.0, {2,3} 0.8 + 0.6, {4,5} 1.45, {6,7} 0.5 -> groups 2 and 1;
  // experts 2 (0.5 + 0.3), 4 (0.75), 5 (0.7); weights from the unbiased 0.5, 0.75, 0.7
  Routed r = route(logits, &bias, 1, s);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 4, 5}));
  const double sum = 0.5 + 0.75 + 0.7 + 1e-20;
  EXPECT_NEAR(r.weight[0], 2.5 * 0.5 / sum, 1e-14);
  EXPECT_NEAR(r.weight[1], 2.5 * 0.75 / sum, 1e-14);
  EXPECT_NEAR(r.weight[2], 2.5 * 0.7 / sum, 1e-14);
  for (int64_t e = 0; e < 8; ++e) EXPECT_NEAR(r.scores[size_t(e)], p[size_t(e)], 1e-15);
  // without it: groups {4,5} 1.45 and {2,3} 1.1; experts 3, 4, 5
  r = route(logits, nullptr, 1, s);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{3, 4, 5}));
  // no renormalisation, no scaling: the sigmoid scores themselves
  r = route(logits, &bias, 1, {.experts = 8, .top_k = 3, .score = RouterScore::sigmoid, .groups = 4, .group_topk = 2});
  EXPECT_NEAR(r.weight[0], 0.5, 1e-15);
  EXPECT_NEAR(r.weight[2], 0.7, 1e-15);
  // one group of all: expert 0 wins
  r = route(logits, &bias, 1, {.experts = 8, .top_k = 3, .score = RouterScore::sigmoid});
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 2, 4}));
}

// Equal scores (an untrained router is all zeros) go to the lower ids, and
// equal groups to the lower groups.
TEST(Router, TiesGoToTheLowerId) {
  const V zeros(16, 0.0);
  Routed r = route(zeros, nullptr, 2, {.experts = 8, .top_k = 3});
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_NEAR(r.weight[0], 1.0 / 8, 1e-16);
  r = route(zeros, nullptr, 2, {.experts = 8, .top_k = 3, .score = RouterScore::sigmoid, .groups = 4, .group_topk = 2});
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  V some = zeros;
  some[5] = some[7] = 1;  // row 0: experts 5 and 7 above the rest, group 2 = group 3
  r = route(some, nullptr, 2, {.experts = 8, .top_k = 3, .score = RouterScore::sigmoid, .groups = 4, .group_topk = 2});
  EXPECT_EQ(std::vector<int32_t>(r.expert.begin(), r.expert.begin() + 3), (std::vector<int32_t>{4, 5, 7}));
  EXPECT_EQ(router_margin(some.data(), static_cast<const double*>(nullptr), 2,
                          {.experts = 8, .top_k = 3, .score = RouterScore::sigmoid, .groups = 4, .group_topk = 2}),
            0.0);
}

// NaN routing is refused, not chosen around: a row with a NaN logit, or any
// row under a NaN correction bias, goes to experts 0..k-1 with NaN weights
// (the step's loss is then not finite, which the trainer's guard refuses);
// the other rows route as without it.
TEST(Router, NonFiniteScoresGiveNonFiniteWeights) {
  V logits = test::randn(16, 3);
  logits[3] = std::numeric_limits<double>::quiet_NaN();  // row 0
  const RouterSpec spec{.experts = 8, .top_k = 2, .score = RouterScore::sigmoid};
  Routed r = route(logits, nullptr, 2, spec);
  EXPECT_EQ(std::vector<int32_t>(r.expert.begin(), r.expert.begin() + 2), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(std::isnan(r.weight[0]) && std::isnan(r.weight[1]));
  EXPECT_TRUE(std::isfinite(r.weight[2]) && std::isfinite(r.weight[3])) << "row 1 routes as without it";
  const V clean = test::randn(16, 3);
  V bias(8, 0.0);
  bias[6] = std::numeric_limits<double>::quiet_NaN();
  r = route(clean, &bias, 2, spec);
  for (double w : r.weight) EXPECT_TRUE(std::isnan(w));
}

// L = <weights, R> + <scores, Q> with the routes fixed: the backward is the
// exact gradient, through the softmax or sigmoid, the renormalisation and
// the scaling; nothing flows into the bias or through the choice.
TEST(Router, BackwardMatchesFiniteDifferences) {
  const int64_t N = 9, E = 8;
  const V bias = randn(size_t(E), 5, 0.1);
  for (RouterScore score : {RouterScore::softmax, RouterScore::sigmoid})
    for (bool norm : {false, true})
      for (bool extra : {false, true}) {
        const RouterSpec s{.experts = E,
                           .top_k = 3,
                           .score = score,
                           .norm_topk = norm,
                           .groups = score == RouterScore::sigmoid ? 4 : 1,
                           .group_topk = score == RouterScore::sigmoid ? 2 : 1,
                           .scaling = score == RouterScore::sigmoid ? 2.5 : 1.0};
        const V* b = score == RouterScore::sigmoid ? &bias : nullptr;
        V logits = randn(size_t(N * E), 7, 1.5);
        ASSERT_GT(router_margin(logits.data(), b ? b->data() : nullptr, N, s), 1e-4) << "a route could flip";
        const V R = randn(size_t(N * 3), 8), Q = extra ? randn(size_t(N * E), 9) : V(size_t(N * E), 0.0);
        const Routed at = route(logits, b, N, s);
        auto f = [&] {
          const Routed r = route(logits, b, N, s);
          EXPECT_EQ(r.expert, at.expert) << "the finite difference moved a route";
          return dot(r.weight, R) + dot(r.scores, Q);
        };
        V dlogits(size_t(N * E));
        router_backward(dlogits.data(), R.data(), extra ? Q.data() : nullptr, at.scores.data(), at.expert.data(), N, s);
        expect_fd_gradient(fmt::format("router {} norm {} dscores {}", score, norm, extra), logits, dlogits, f, 1e-7,
                           size_t(N * E));
      }
}

// float rows in parallel: the same bits on one thread and on two, and a row
// routed alone gives the bits it gets among others.
TEST(Router, SameBitsOnAnyThreadsAndBatch) {
  const int64_t N = 101, E = 16, k = 4;
  std::vector<float> logits(size_t(N * E)), bias(static_cast<size_t>(E));
  const V l = randn(logits.size(), 3, 2.0), b = randn(bias.size(), 4, 0.05);
  std::copy(l.begin(), l.end(), logits.begin());
  std::copy(b.begin(), b.end(), bias.begin());
  const RouterSpec s{.experts = E,
                     .top_k = k,
                     .score = RouterScore::sigmoid,
                     .norm_topk = true,
                     .groups = 4,
                     .group_topk = 2,
                     .scaling = 2.5};
  auto run = [&](int threads, int64_t rows, int64_t first) {
    omp_set_num_threads(threads);
    std::vector<int32_t> ex(size_t(rows * k));
    std::vector<float> w(size_t(rows * k)), p(size_t(rows * E)), dl(size_t(rows * E)), dw(size_t(rows * k), 0.5f);
    router_forward(ex.data(), w.data(), p.data(), logits.data() + first * E, bias.data(), rows, s);
    router_backward(dl.data(), dw.data(), static_cast<const float*>(nullptr), p.data(), ex.data(), rows, s);
    return std::make_tuple(ex, w, dl);
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1, N, 0), two = run(2, N, 0), row = run(2, 1, 57);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  for (int64_t j = 0; j < k; ++j) {
    EXPECT_EQ(std::get<0>(row)[size_t(j)], std::get<0>(two)[size_t(57 * k + j)]);
    EXPECT_EQ(std::get<1>(row)[size_t(j)], std::get<1>(two)[size_t(57 * k + j)]);
  }
}

TEST(Router, BadSpecIsRefused) {
  const V l(8, 0.0);
  for (const RouterSpec& s : {RouterSpec{.experts = 8, .top_k = 9}, RouterSpec{.experts = 8, .top_k = 0},
                              RouterSpec{.experts = 8, .top_k = 2, .groups = 3},
                              RouterSpec{.experts = 8, .top_k = 2, .groups = 4, .group_topk = 5},
                              RouterSpec{.experts = 8, .top_k = 5, .groups = 4, .group_topk = 2}})
    EXPECT_THROW(route(l, nullptr, 1, s), Error) << s.top_k << " " << s.groups << " " << s.group_topk;
}

}  // namespace
}  // namespace trident::kernels
