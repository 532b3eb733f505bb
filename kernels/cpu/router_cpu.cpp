// CPU router (kernels/router.hpp): a row per token, rows in parallel, each
// row's choice a total order (score descending, then id ascending; a NaN
// score counts as -inf), so the result is the same on any number of threads.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "kernels/router.hpp"

namespace trident::kernels {
namespace {

constexpr double kSigmoidNormEps = 1e-20;  // transformers' DeepSeek-V3 renormalisation

template <typename T>
double key(T v) {
  return std::isnan(double(v)) ? -std::numeric_limits<double>::infinity() : double(v);
}

// The k best of ids (by c descending, then id ascending), the rest after them.
template <typename T>
void best_first(std::vector<int32_t>& ids, size_t k, const T* c) {
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(std::min(k, ids.size())), ids.end(),
                    [&](int32_t a, int32_t b) { return key(c[a]) > key(c[b]) || (key(c[a]) == key(c[b]) && a < b); });
}

// One row's scores p from its logits.
template <typename T>
void row_scores(T* p, const T* logits, int64_t E, RouterScore score) {
  if (score == RouterScore::sigmoid) {
    for (int64_t e = 0; e < E; ++e) p[e] = T(1) / (T(1) + std::exp(-logits[e]));
    return;
  }
  T top = logits[0];
  for (int64_t e = 1; e < E; ++e) top = std::max(top, logits[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += double(p[e] = std::exp(logits[e] - top));
  for (int64_t e = 0; e < E; ++e) p[e] = T(double(p[e]) / sum);
}

// One row's choice: the experts allowed (those of the best groups), best first.
// c: the choice scores (p + bias). gaps, when given, receive the row's group
// gap and expert gap (+inf where nothing can flip).
template <typename T>
std::vector<int32_t> row_choice(const T* c, const RouterSpec& s, double* group_gap = nullptr,
                                double* expert_gap = nullptr) {
  const int64_t E = s.experts, G = E / s.groups;
  std::vector<int32_t> allowed;
  if (s.groups > 1) {
    std::vector<T> gscore(size_t(s.groups));
    std::vector<int32_t> in_group(static_cast<size_t>(G));
    for (int64_t g = 0; g < s.groups; ++g) {  // the sum of the group's two best (one, for groups of one)
      std::iota(in_group.begin(), in_group.end(), int32_t(g * G));
      best_first(in_group, 2, c);
      gscore[size_t(g)] = c[in_group[0]] + (G > 1 ? c[in_group[1]] : T(0));
    }
    std::vector<int32_t> groups(size_t(s.groups));
    std::iota(groups.begin(), groups.end(), 0);
    best_first(groups, size_t(s.group_topk), gscore.data());
    if (group_gap)
      *group_gap = s.group_topk < s.groups ? key(gscore[size_t(groups[size_t(s.group_topk - 1)])]) -
                                                 key(gscore[size_t(groups[size_t(s.group_topk)])])
                                           : std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < s.group_topk; ++i)
      for (int64_t e = 0; e < G; ++e) allowed.push_back(int32_t(groups[size_t(i)] * G + e));
  } else {
    allowed.resize(size_t(E));
    std::iota(allowed.begin(), allowed.end(), 0);
    if (group_gap) *group_gap = std::numeric_limits<double>::infinity();
  }
  best_first(allowed, size_t(s.top_k), c);
  if (expert_gap)
    *expert_gap = size_t(s.top_k) < allowed.size()
                      ? key(c[allowed[size_t(s.top_k - 1)]]) - key(c[allowed[size_t(s.top_k)]])
                      : std::numeric_limits<double>::infinity();
  return allowed;
}

// The choice scores of one row: p, or p + bias.
template <typename T>
const T* choice_scores(std::vector<T>& buf, const T* p, const T* bias, int64_t E) {
  if (!bias) return p;
  buf.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) buf[size_t(e)] = p[e] + bias[e];
  return buf.data();
}

// The renormalising sum of one row's chosen scores (1 without norm_topk).
template <typename T>
double chosen_sum(const T* p, const int32_t* expert, const RouterSpec& s) {
  if (!s.norm_topk) return 1;
  double sum = 0;
  for (int64_t j = 0; j < s.top_k; ++j) sum += double(p[expert[j]]);
  return sum + (s.score == RouterScore::sigmoid ? kSigmoidNormEps : 0);
}

}  // namespace

void check_router(const RouterSpec& s) {
  TRIDENT_CHECK(s.experts >= 1 && s.top_k >= 1 && s.top_k <= s.experts, "router: top_k {} of {} experts", s.top_k,
                s.experts);
  TRIDENT_CHECK(s.groups >= 1 && s.experts % s.groups == 0, "router: {} groups of {} experts", s.groups, s.experts);
  TRIDENT_CHECK(s.group_topk >= 1 && s.group_topk <= s.groups, "router: group_topk {} of {} groups", s.group_topk,
                s.groups);
  TRIDENT_CHECK(s.top_k <= s.group_topk * (s.experts / s.groups),
                "router: top_k {} > group_topk {} x {} experts per group", s.top_k, s.group_topk, s.experts / s.groups);
}

template <typename T>
void router_forward(int32_t* expert, T* weight, T* scores, const T* logits, const T* bias, int64_t N,
                    const RouterSpec& s) {
  check_router(s);
  const int64_t E = s.experts, k = s.top_k;
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* p = scores + n * E;
    row_scores(p, logits + n * E, E, s.score);
    std::vector<T> buf;
    const T* c = choice_scores(buf, p, bias, E);
    if (!std::all_of(c, c + E, [](T x) { return std::isfinite(double(x)); })) {
      // NaN routing: the first k experts with NaN weights, so the step's loss is not finite and the run's
      // non-finite guard stops or skips it (never a silent choice among NaNs)
      for (int64_t j = 0; j < k; ++j)
        expert[n * k + j] = int32_t(j), weight[n * k + j] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    std::vector<int32_t> chosen = row_choice(c, s);
    chosen.resize(size_t(k));
    std::sort(chosen.begin(), chosen.end());  // added in increasing expert id
    int32_t* ex = expert + n * k;
    std::copy(chosen.begin(), chosen.end(), ex);
    const double sum = chosen_sum(p, ex, s);
    for (int64_t j = 0; j < k; ++j) weight[n * k + j] = T(double(p[ex[j]]) / sum * s.scaling);
  }
}

template <typename T>
void router_backward(T* dlogits, const T* dweight, const T* dscores, const T* scores, const int32_t* expert, int64_t N,
                     const RouterSpec& s) {
  check_router(s);
  const int64_t E = s.experts, k = s.top_k;
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* p = scores + n * E;
    const int32_t* ex = expert + n * k;
    std::vector<double> dp(size_t(E), 0.0);
    if (dscores)
      for (int64_t e = 0; e < E; ++e) dp[size_t(e)] = double(dscores[n * E + e]);
    // w_j = scaling * p_j / S: dp_j += scaling (g_j / S - sum_i g_i p_i / S^2), S a constant 1 without norm_topk
    const double S = chosen_sum(p, ex, s);
    double gp = 0;
    for (int64_t j = 0; j < k; ++j) gp += double(dweight[n * k + j]) * double(p[ex[j]]);
    for (int64_t j = 0; j < k; ++j)
      dp[size_t(ex[j])] += s.scaling * (double(dweight[n * k + j]) / S - (s.norm_topk ? gp / (S * S) : 0.0));
    T* dl = dlogits + n * E;
    if (s.score == RouterScore::sigmoid) {
      for (int64_t e = 0; e < E; ++e) dl[e] = T(dp[size_t(e)] * double(p[e]) * (1 - double(p[e])));
    } else {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += double(p[e]) * dp[size_t(e)];
      for (int64_t e = 0; e < E; ++e) dl[e] = T(double(p[e]) * (dp[size_t(e)] - dot));
    }
  }
}

template <typename T>
double router_margin(const T* logits, const T* bias, int64_t N, const RouterSpec& s) {
  check_router(s);
  const int64_t E = s.experts;
  double margin = std::numeric_limits<double>::infinity();
  std::vector<T> p(static_cast<size_t>(E)), buf;
  for (int64_t n = 0; n < N; ++n) {
    row_scores(p.data(), logits + n * E, E, s.score);
    const T* c = choice_scores(buf, p.data(), bias, E);
    double scale = 0;
    for (int64_t e = 0; e < E; ++e) scale = std::max(scale, std::abs(double(c[e])));
    double group_gap = 0, expert_gap = 0;
    row_choice(c, s, &group_gap, &expert_gap);
    margin = std::min({margin, group_gap / std::max(scale, 1e-30), expert_gap / std::max(scale, 1e-30)});
  }
  return margin;
}

template <typename T>
double router_z_loss(const T* logits, int64_t N, int64_t E, T* dlogits, double scale) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * E;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(l[e]));
    for (int64_t e = 0; e < E; ++e) sum += std::exp(double(l[e]) - mx);
    const double lse = mx + std::log(sum);
    total += lse * lse;
    if (!dlogits) continue;
    const double f = scale * 2 * lse;
    for (int64_t e = 0; e < E; ++e) dlogits[n * E + e] += T(f * std::exp(double(l[e]) - mx) / sum);
  }
  return total;
}

template <typename T>
void balance_loss_grad(T* dscores, const T* scores, const T* counts, int64_t N, int64_t E, int64_t groups,
                       double factor, double scale, RouterScore score, bool wrt_q) {
  const int64_t rows = N / groups;
  std::vector<double> dq(static_cast<size_t>(E));
  for (int64_t b = 0; b < groups; ++b) {
    const T* c = counts + b * E;
    for (int64_t n = b * rows; n < (b + 1) * rows; ++n) {
      const T* p = scores + n * E;
      for (int64_t e = 0; e < E; ++e) dq[size_t(e)] = scale * factor * double(c[e]);
      if (wrt_q || score == RouterScore::softmax) {  // softmax: q = p
        for (int64_t e = 0; e < E; ++e) dscores[n * E + e] += T(dq[size_t(e)]);
        continue;
      }
      double sum = 0, dot = 0;
      for (int64_t e = 0; e < E; ++e) sum += double(p[e]);
      for (int64_t e = 0; e < E; ++e) dot += dq[size_t(e)] * double(p[e]) / sum;
      for (int64_t e = 0; e < E; ++e) dscores[n * E + e] += T((dq[size_t(e)] - dot) / sum);
    }
  }
}

template <typename T>
double balance_loss_value(const T* scores, const T* dq, int64_t N, int64_t E, RouterScore score) {
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0, dot = 0;
    for (int64_t e = 0; e < E; ++e) sum += double(scores[n * E + e]);
    for (int64_t e = 0; e < E; ++e) {
      const double q = score == RouterScore::softmax ? double(scores[n * E + e]) : scores[n * E + e] / sum;
      dot += q * double(dq[n * E + e]);
    }
    loss += dot;
  }
  return loss;
}

template <typename T>
void gate_sigmoid(T* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = T(1) / (T(1) + std::exp(-g[i]));
}

template <typename T>
void gate_sigmoid_backward(T* dg, const T* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dg[i] *= g[i] * (T(1) - g[i]);
}

#define INSTANTIATE(T)                                                                                               \
  template void router_forward<T>(int32_t*, T*, T*, const T*, const T*, int64_t, const RouterSpec&);                 \
  template void router_backward<T>(T*, const T*, const T*, const T*, const int32_t*, int64_t, const RouterSpec&);    \
  template double router_margin<T>(const T*, const T*, int64_t, const RouterSpec&);                                  \
  template double router_z_loss<T>(const T*, int64_t, int64_t, T*, double);                                          \
  template void balance_loss_grad<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, double, double, RouterScore, \
                                     bool);                                                                          \
  template double balance_loss_value<T>(const T*, const T*, int64_t, int64_t, RouterScore);                          \
  template void gate_sigmoid<T>(T*, int64_t);                                                                        \
  template void gate_sigmoid_backward<T>(T*, const T*, int64_t);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
