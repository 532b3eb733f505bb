// GEMM throughput (oneDNN sgemm, the trainer's path) against this machine's
// measured fp32 FMA peak, at 1 and 2 threads: square sizes and the GPT-2 124M
// training shapes at micro-batch 4 x sequence 64 (N = 256 tokens).
// Counters: GFLOP/s, and peak_frac = achieved / measured FMA peak for the
// thread count. Verifies one result element before timing.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "bench/peak.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"

namespace trident::bench {

static double peak_for(int threads) {
  static double peaks[65] = {};
  if (peaks[threads] == 0) peaks[threads] = measure_fma_peak(threads);
  return peaks[threads];
}

// args: M, N, K, trans_b (weights [out,in] as in linear_forward), threads;
// bf16: the bf16 path of train.precision bf16 (oneDNN bf16 matmul, operands
// converted from fp32 buffers holding bf16 values, fp32 result)
static void gemm_bench(benchmark::State& st, kernels::Precision precision) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  const bool tb = st.range(3) != 0;
  const int threads = int(st.range(4));
  kernels::set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(M * K)), b(size_t(K * N)), c(size_t(M * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) * 0.125f;  // bf16 values: the bf16 path is exact
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) * 0.25f;
  kernels::gemm<float>(false, tb, M, N, K, 1.f, a.data(), K, b.data(), tb ? K : N, 0.f, c.data(), N, precision);
  double ref = 0;  // verify c[0][N-1]
  for (int64_t k = 0; k < K; ++k)
    ref += double(a[size_t(k)]) * double(tb ? b[size_t((N - 1) * K + k)] : b[size_t(k * N + N - 1)]);
  if (std::abs(ref - c[size_t(N - 1)]) > 1e-3 * std::max(1.0, std::abs(ref))) st.SkipWithError("wrong result");
  for (auto _ : st) {
    kernels::gemm<float>(false, tb, M, N, K, 1.f, a.data(), K, b.data(), tb ? K : N, 0.f, c.data(), N, precision);
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * double(M * N * K);
  st.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["peak_GFLOP/s"] = peak_for(threads) / 1e9;  // the fp32 FMA peak
}
static void BM_sgemm(benchmark::State& st) { gemm_bench(st, kernels::Precision::fp32); }
static void BM_bf16_gemm(benchmark::State& st) { gemm_bench(st, kernels::Precision::bf16); }

static void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int64_t n : {512, 1024, 2048}) b->Args({n, n, n, 0, threads});
    // GPT-2 124M at N = 256 tokens: qkv, attn proj, fc, mlp proj, lm head
    b->Args({256, 2304, 768, 1, threads});
    b->Args({256, 768, 768, 1, threads});
    b->Args({256, 3072, 768, 1, threads});
    b->Args({256, 768, 3072, 1, threads});
    b->Args({256, 50257, 768, 1, threads});
  }
  b->ArgNames({"M", "N", "K", "transB", "threads"});
}
BENCHMARK(BM_sgemm)->Apply(Args)->UseRealTime()->MinTime(0.3);
BENCHMARK(BM_bf16_gemm)->Apply(Args)->UseRealTime()->MinTime(0.3);

static void BM_fma_peak(benchmark::State& st) {
  double p = 0;
  for (auto _ : st) p = measure_fma_peak(int(st.range(0)), 0.2);
  st.counters["GFLOP/s"] = p / 1e9;
}
BENCHMARK(BM_fma_peak)->Arg(1)->Arg(2)->ArgName("threads")->Iterations(1)->UseRealTime();

}  // namespace trident::bench

BENCHMARK_MAIN();
