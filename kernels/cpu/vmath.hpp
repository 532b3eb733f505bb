// Vectorisable exp and tanh for the CPU kernels' float path.
// exp: range reduction x = n ln2 + r (Cody-Waite split), degree-6 polynomial
// for e^r on [-ln2/2, ln2/2], 2^n by exponent bits; relative error < 2e-7 on
// [-87, 88], 0 below. Straight-line code, so `omp simd` loops vectorise it
// (std::exp on float does not vectorise without -ffast-math). The double
// overloads are std:: (the finite-difference reference path).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace trident::kernels {

inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // round to nearest by the 1.5 * 2^23 trick (vectorises, unlike nearbyint)
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
inline double vexp(double x) { return std::exp(x); }

// tanh(u) = 1 - 2 / (exp(2u) + 1)
inline float vtanh(float u) { return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f); }
inline double vtanh(double u) { return std::tanh(u); }

}  // namespace trident::kernels
