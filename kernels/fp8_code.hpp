// The FP8 encode and decode of kernels/fp8.hpp as inline functions both the
// CPU code and the CUDA kernels compile (kernels/cpu/fp8_cpu.cpp,
// kernels/cuda/fp8_cuda.cu), so that the two give the same bits: integer
// arithmetic on the float's bits and one float addition (the subnormal
// grid), no library call. Formats: 0 e4m3, 1 e5m2.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(TRIDENT_CUDA_EMULATION)
#define TRIDENT_FP8_HD __host__ __device__
#else
#define TRIDENT_FP8_HD
#endif

namespace trident::kernels::fp8_code {

TRIDENT_FP8_HD inline uint32_t bits_of(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  return b;
}
TRIDENT_FP8_HD inline float float_of(uint32_t b) {
  float x;
  memcpy(&x, &b, 4);
  return x;
}

// Round-to-nearest-even of a non-negative finite float's bits into `mant`
// mantissa bits and exponent bias `bias`: normal numbers by rebasing the
// exponent and rounding at bit 23 - mant; below the smallest normal by
// adding a power of two that puts the subnormal grid at the float's last
// mantissa bits (the adder rounds to nearest even), as PyTorch does.
TRIDENT_FP8_HD inline uint32_t round_magnitude(uint32_t bits, int mant, int bias) {
  const uint32_t min_normal = uint32_t(127 + 1 - bias) << 23;
  if (bits < min_normal) {
    const uint32_t denorm = uint32_t(127 + 1 - bias + 23 - mant) << 23;
    return bits_of(float_of(bits) + float_of(denorm)) - denorm;
  }
  const int drop = 23 - mant;
  const uint32_t odd = (bits >> drop) & 1u;
  bits += (uint32_t(bias - 127) << 23) + ((1u << (drop - 1)) - 1) + odd;
  return bits >> drop;
}

// PyTorch's cast: e4m3 saturates (finite overflow and infinity), e5m2
// rounds past its largest to infinity; NaN to NaN with its sign.
TRIDENT_FP8_HD inline uint8_t encode(int format, float x) {
  const uint32_t bits = bits_of(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return uint8_t(sign | 0x7f);
  if (format == 0) {
    if (mag >= 0x43e80000u) return uint8_t(sign | 0x7e);  // 464 and above round past 448
    return uint8_t(sign | round_magnitude(mag, 3, 7));
  }
  if (mag >= 0x47700000u) return uint8_t(sign | 0x7c);  // 61440 and above round to infinity
  return uint8_t(sign | round_magnitude(mag, 2, 15));
}

// Clamped to +-max first (NaN stays NaN).
TRIDENT_FP8_HD inline uint8_t encode_saturated(int format, float x) {
  const float m = format == 0 ? 448.0f : 57344.0f;
  if (x > m) x = m;
  if (x < -m) x = -m;
  return encode(format, x);
}

// Exact: sign, exponent, mantissa into a float's bits.
TRIDENT_FP8_HD inline float decode(int format, uint8_t b) {
  const int mant = format == 0 ? 3 : 2, bias = format == 0 ? 7 : 15, top = format == 0 ? 15 : 31;
  const uint32_t sign = uint32_t(b & 0x80) << 24;
  const int e = (b & 0x7f) >> mant, m = b & ((1 << mant) - 1);
  if (format == 0 && e == top && m == 7) return float_of(sign | 0x7fc00000u);
  if (format == 1 && e == top) return float_of(sign | (m == 0 ? 0x7f800000u : 0x7fc00000u));
  if (e == 0) {  // subnormal: m x 2^(1 - bias - mant), exact in float
    const float unit = float_of(uint32_t(127 + 1 - bias - mant) << 23);
    return float_of(sign | bits_of(float(m) * unit));
  }
  return float_of(sign | (uint32_t(e - bias + 127) << 23) | (uint32_t(m) << (23 - mant)));
}

// The power of two at or above s > 0 (s itself when it is one), exactly.
TRIDENT_FP8_HD inline float pow2_at_or_above(float s) {
  const uint32_t b = bits_of(s);
  if ((b & 0x7f800000u) == 0) {  // subnormal: the smallest normal power of two at or above it, stepping down
    float p = float_of(0x00800000u);
    while (p / 2 >= s && p / 2 > 0) p /= 2;
    return p;
  }
  if ((b & 0x007fffffu) == 0) return s;
  return float_of((b & 0x7f800000u) + 0x00800000u);
}

}  // namespace trident::kernels::fp8_code
