// The experts of an MoE layer, forward (gate|up GEMM, SwiGLU, down GEMM) and
// backward (both GEMMs' input and weight gradients), three ways in the same
// run: the grouped GEMM spread over the threads (each expert's GEMM on one),
// one GEMM per expert in sequence (each on every thread), and a dense SwiGLU
// MLP of the same active FLOPs (width top_k x I over the N tokens). Routes
// are drawn with a skew, so experts get unequal row counts, as trained
// routers give. Counters: each way's GFLOP/s (forward + backward, 3x the
// forward FLOPs), and the grouped GEMM's speed-up over the other two.
// Args: tokens N, experts E, top_k, hidden C, expert width I, threads.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/activation.hpp"
#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"

namespace trident::bench {
namespace {

struct Experts {
  int64_t N, E, K, C, I, M;
  std::vector<int64_t> offsets;  // [E+1] rows per expert, skewed
  std::vector<float> x, w_in, w_out, fc, act, y, dy, dact, dfc, dx, dw_in, dw_out;
  Experts(int64_t n, int64_t e, int64_t k, int64_t c, int64_t i) : N(n), E(e), K(k), C(c), I(i), M(n * k) {
    std::mt19937 rng(7);
    std::vector<double> share(static_cast<size_t>(E));
    for (int64_t j = 0; j < E; ++j) share[size_t(j)] = std::exp(-0.15 * double(j));  // a skewed load
    double total = 0;
    for (double s : share) total += s;
    offsets.assign(size_t(E + 1), 0);
    for (int64_t j = 0; j < E; ++j)
      offsets[size_t(j + 1)] = offsets[size_t(j)] + int64_t(double(M) * share[size_t(j)] / total);
    offsets[size_t(E)] = M;
    auto fill = [&](std::vector<float>& v, int64_t count) {
      std::normal_distribution<float> d(0.f, 0.02f);
      v.resize(size_t(count));
      for (auto& a : v) a = d(rng);
    };
    fill(x, M * C), fill(w_in, E * 2 * I * C), fill(w_out, E * C * I), fill(dy, M * C);
    fc.resize(size_t(M * 2 * I)), act.resize(size_t(M * I)), y.resize(size_t(M * C));
    dact.resize(act.size()), dfc.resize(fc.size()), dx.resize(x.size());
    dw_in.resize(w_in.size()), dw_out.resize(w_out.size());
  }
  double flops() const {
    return 3 * (2.0 * double(M) * double(C) * double(2 * I) + 2.0 * double(M) * double(I) * double(C));
  }
  void step(kernels::GroupedSchedule s) {
    kernels::grouped_linear_forward(fc.data(), x.data(), w_in.data(), offsets.data(), E, C, 2 * I,
                                    kernels::Precision::fp32, s);
    kernels::swiglu_forward(act.data(), fc.data(), M, I);
    kernels::grouped_linear_forward(y.data(), act.data(), w_out.data(), offsets.data(), E, I, C,
                                    kernels::Precision::fp32, s);
    kernels::grouped_linear_backward(dact.data(), dw_out.data(), dy.data(), act.data(), w_out.data(), offsets.data(), E,
                                     I, C, false, kernels::Precision::fp32, s);
    kernels::swiglu_backward(dfc.data(), fc.data(), dact.data(), M, I);
    kernels::grouped_linear_backward(dx.data(), dw_in.data(), dfc.data(), x.data(), w_in.data(), offsets.data(), E, C,
                                     2 * I, false, kernels::Precision::fp32, s);
  }
};

// The dense SwiGLU MLP of the same FLOPs: N tokens, width K x I.
struct Dense {
  int64_t N, C, F;
  std::vector<float> x, w_in, w_out, fc, act, y, dy, dact, dfc, dx, dw_in, dw_out;
  Dense(int64_t n, int64_t c, int64_t f) : N(n), C(c), F(f) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.f, 0.02f);
    for (auto* v : {&x, &dy}) v->resize(size_t(N * C));
    w_in.resize(size_t(2 * F * C)), w_out.resize(size_t(C * F));
    for (auto* v : {&x, &dy, &w_in, &w_out})
      for (auto& a : *v) a = d(rng);
    fc.resize(size_t(N * 2 * F)), act.resize(size_t(N * F)), y.resize(size_t(N * C));
    dact.resize(act.size()), dfc.resize(fc.size()), dx.resize(x.size());
    dw_in.resize(w_in.size()), dw_out.resize(w_out.size());
  }
  void step() {
    kernels::linear_forward(fc.data(), x.data(), w_in.data(), static_cast<const float*>(nullptr), N, C, 2 * F);
    kernels::swiglu_forward(act.data(), fc.data(), N, F);
    kernels::linear_forward(y.data(), act.data(), w_out.data(), static_cast<const float*>(nullptr), N, F, C);
    kernels::linear_backward(dact.data(), dw_out.data(), static_cast<float*>(nullptr), dy.data(), act.data(),
                             w_out.data(), N, F, C, false);
    kernels::swiglu_backward(dfc.data(), fc.data(), dact.data(), N, F);
    kernels::linear_backward(dx.data(), dw_in.data(), static_cast<float*>(nullptr), dfc.data(), x.data(), w_in.data(),
                             N, C, 2 * F, false);
  }
};

// Each iteration runs the three, alternating (these machines are shared
// and noisy), each timed alone; the counters are their rates and ratios.
void BM_moe_experts(benchmark::State& st) {
  kernels::set_num_threads(int(st.range(5)));
  Experts e(st.range(0), st.range(1), st.range(2), st.range(3), st.range(4));
  Dense d(st.range(0), st.range(3), st.range(2) * st.range(4));
  e.step(kernels::GroupedSchedule::across_groups), e.step(kernels::GroupedSchedule::per_group), d.step();
  double t_grouped = 0, t_per_expert = 0, t_dense = 0;
  auto timed = [](double& total, auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t n = 0;
  for (auto _ : st) {
    timed(t_grouped, [&] { e.step(kernels::GroupedSchedule::across_groups); });
    timed(t_per_expert, [&] { e.step(kernels::GroupedSchedule::per_group); });
    timed(t_dense, [&] { d.step(); });
    ++n;
  }
  const double f = e.flops() * double(n) / 1e9;
  st.counters["grouped_GFLOP/s"] = f / t_grouped;
  st.counters["per_expert_GFLOP/s"] = f / t_per_expert;
  st.counters["dense_GFLOP/s"] = f / t_dense;
  st.counters["grouped/per_expert"] = t_per_expert / t_grouped;
  st.counters["grouped/dense"] = t_dense / t_grouped;
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({2048, 8, 2, 128, 96, threads});    // configs/moe-tiny.yaml's layer, micro-batch 8 x 64 x 4
    b->Args({1024, 8, 2, 768, 768, threads});   // 124M-class width, Mixtral-like 8 experts top 2
    b->Args({1024, 64, 8, 768, 128, threads});  // fine-grained: 64 small experts, top 8 (Qwen3-MoE / DeepSeek style)
  }
}

}  // namespace

BENCHMARK(BM_moe_experts)->Apply(Args)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace trident::bench

BENCHMARK_MAIN();
