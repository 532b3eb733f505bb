// CPU storage rounding for mixed precision (see kernels/precision.hpp).
// bf16: the f32 bit pattern rounded to its top 16 bits (core/dtype.hpp);
// fp16: through _Float16 (F16C's vcvtps2ph: round to nearest even, overflow
// to inf, subnormals kept).
#include "kernels/precision.hpp"

#include <cmath>
#include <cstring>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace trident::kernels {

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float round_fp16(float x) { return float(static_cast<_Float16>(x)); }

namespace cpu {
template <typename T>
void round_to_storage(T* x, int64_t n, Precision p) {
  if (p == Precision::fp32) return;
  if (p == Precision::bf16) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) x[i] = T(round_bf16(float(x[i])));
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) x[i] = T(round_fp16(float(x[i])));
  }
}

template <typename T>
int64_t count_nonfinite(const T* x, int64_t n) {
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(x[i]) ? 0 : 1;
  return bad;
}

template <typename T>
void pack_16(uint16_t* dst, const T* src, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "pack_16 needs a 16-bit format");
  if (p == Precision::bf16) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(float(src[i]));
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) {
      const _Float16 h = static_cast<_Float16>(float(src[i]));
      std::memcpy(&dst[i], &h, 2);
    }
  }
}

template <typename T>
void store_16(T* x, uint16_t* dst, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "store_16 needs a 16-bit format");
  if (p == Precision::bf16) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(float(x[i]));
      dst[i] = h;
      x[i] = T(bf16_to_f32(h));
    }
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) {
      const _Float16 h = static_cast<_Float16>(float(x[i]));
      std::memcpy(&dst[i], &h, 2);
      x[i] = T(float(h));
    }
  }
}

template <typename T>
void unpack_16(T* dst, const uint16_t* src, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "unpack_16 needs a 16-bit format");
  if (p == Precision::bf16) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) dst[i] = T(bf16_to_f32(src[i]));
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) dst[i] = T(f16_to_f32(src[i]));
  }
}
}  // namespace cpu

template void cpu::pack_16<float>(uint16_t*, const float*, int64_t, Precision);
template void cpu::pack_16<double>(uint16_t*, const double*, int64_t, Precision);
template void cpu::store_16<float>(float*, uint16_t*, int64_t, Precision);
template void cpu::store_16<double>(double*, uint16_t*, int64_t, Precision);
template void cpu::unpack_16<float>(float*, const uint16_t*, int64_t, Precision);
template void cpu::unpack_16<double>(double*, const uint16_t*, int64_t, Precision);
template void cpu::round_to_storage<float>(float*, int64_t, Precision);
template void cpu::round_to_storage<double>(double*, int64_t, Precision);
template int64_t cpu::count_nonfinite<float>(const float*, int64_t);
template int64_t cpu::count_nonfinite<double>(const double*, int64_t);

}  // namespace trident::kernels
