// Buffer operations (see kernels/buffer.hpp) on the CPU; copy and
// synchronize serve every device (core/device_memory.hpp).
#include "kernels/buffer.hpp"

#include <algorithm>
#include <cstring>

#include "core/device_memory.hpp"

namespace trident::kernels {

namespace {
constexpr int64_t kChunk = 1 << 16;

template <typename T>
double chunked(const T* x, int64_t n, bool squares) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    if (squares) {
#pragma omp simd reduction(+ : s)
      for (int64_t i = c * kChunk; i < end; ++i) s += double(x[i]) * double(x[i]);
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = c * kChunk; i < end; ++i) s += double(x[i]);
    }
    part[size_t(c)] = s;
  }
  double total = 0;
  for (double s : part) total += s;
  return total;
}
}  // namespace

template <typename T>
void copy(T* dst, const T* src, int64_t n) {
  if (n <= 0 || dst == src) return;
  copy_bytes(dst, src, size_t(n) * sizeof(T));  // host-only: memmove
}

namespace cpu {
template <typename T>
void fill_zero(T* x, int64_t n) {
  if (n <= 0) return;
  std::fill(x, x + n, T(0));
}

template <typename T>
double sum(const T* x, int64_t n) {
  return chunked(x, n, false);
}

template <typename T>
double sum_of_squares_ranges(const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  double total = 0;
  for (auto [b, e] : ranges) total += chunked(x + b, e - b, true);
  return total;
}
}  // namespace cpu

void synchronize() { device_synchronize(); }

#define INSTANTIATE(T)                            \
  template void copy<T>(T*, const T*, int64_t);   \
  template void cpu::fill_zero<T>(T*, int64_t);   \
  template double cpu::sum<T>(const T*, int64_t); \
  template double cpu::sum_of_squares_ranges<T>(const T*, const std::vector<std::pair<int64_t, int64_t>>&);
INSTANTIATE(float)
INSTANTIATE(double)
template void copy<int32_t>(int32_t*, const int32_t*, int64_t);

}  // namespace trident::kernels
