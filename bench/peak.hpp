// Measured fp32 FMA peak of this machine (AVX-512 when compiled for it):
// 16 independent FMA chains per thread, all threads at once.
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <chrono>

namespace trident::bench {

inline double measure_fma_peak(int threads, double seconds = 0.3) {
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
#ifdef __AVX512F__
    __m512 acc[16];
    for (auto& a : acc) a = _mm512_set1_ps(0.f);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    constexpr double kFlopsPerIter = 16.0 * 16 * 2;
#else
    __m256 acc[16];
    for (auto& a : acc) a = _mm256_set1_ps(0.f);
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    constexpr double kFlopsPerIter = 16.0 * 8 * 2;
#endif
    long iters = 0;
    auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    while (el < seconds) {
      for (int r = 0; r < 1000; ++r)
        for (auto& a : acc)
#ifdef __AVX512F__
          a = _mm512_fmadd_ps(a, x, y);
#else
          a = _mm256_fmadd_ps(a, x, y);
#endif
      iters += 1000;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    float sink = 0;
    for (auto& a : acc) {
      alignas(64) float buf[16];
#ifdef __AVX512F__
      _mm512_store_ps(buf, a);
#else
      _mm256_store_ps(buf, a);
#endif
      sink += buf[0];
    }
    total = double(iters) * kFlopsPerIter / el + (sink == 12345.f ? 1 : 0);
  }
  return total;
}

}  // namespace trident::bench
