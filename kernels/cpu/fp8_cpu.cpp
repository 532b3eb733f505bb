// FP8 numbers and scalings on the CPU (see kernels/fp8.hpp).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kernels/fp8.hpp"

namespace trident::kernels::fp8 {

namespace {

// Round-to-nearest-even of a non-negative finite float (bits, sign cleared)
// into a format of `mant` mantissa bits and exponent bias `bias`: the byte's
// magnitude bits (may carry into the exponent, past the largest finite
// value: the caller decides what that means). Normal numbers: the float's
// exponent rebased and its mantissa rounded at bit 23 - mant; below the
// smallest normal 2^(1 - bias), by adding a power of two that puts the
// subnormal grid at the float's last mantissa bits (the hardware adder
// rounds to nearest even), as PyTorch does.
uint32_t round_magnitude(uint32_t bits, int mant, int bias) {
  const uint32_t min_normal = uint32_t(127 + 1 - bias) << 23;
  if (bits < min_normal) {
    // 2^(1 - bias) x 2^(23 - mant): the sum's last mantissa bits are the subnormal count
    const uint32_t denorm = uint32_t(127 + 1 - bias + 23 - mant) << 23;
    const float sum = std::bit_cast<float>(bits) + std::bit_cast<float>(denorm);
    return std::bit_cast<uint32_t>(sum) - denorm;
  }
  const int drop = 23 - mant;
  const uint32_t odd = (bits >> drop) & 1u;
  bits += (uint32_t(bias - 127) << 23) + ((1u << (drop - 1)) - 1) + odd;
  return bits >> drop;
}

}  // namespace

uint8_t encode(Format f, float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return uint8_t(sign | 0x7f);  // NaN
  if (f == Format::e4m3) {
    // 464 and above round past 448, as does infinity: saturate (no infinity in e4m3fn)
    if (mag >= std::bit_cast<uint32_t>(464.0f)) return uint8_t(sign | 0x7e);
    return uint8_t(sign | round_magnitude(mag, 3, 7));
  }
  if (mag >= std::bit_cast<uint32_t>(61440.0f)) return uint8_t(sign | 0x7c);  // rounds to infinity
  return uint8_t(sign | round_magnitude(mag, 2, 15));
}

uint8_t encode_saturated(Format f, float x) {
  if (std::isnan(x)) return encode(f, x);
  const float m = max_of(f);
  return encode(f, std::clamp(x, -m, m));
}

float decode(Format f, uint8_t b) {
  const bool neg = (b & 0x80) != 0;
  const int mant_bits = f == Format::e4m3 ? 3 : 2, bias = f == Format::e4m3 ? 7 : 15;
  const int e = (b & 0x7f) >> mant_bits, m = b & ((1 << mant_bits) - 1);
  const int top = f == Format::e4m3 ? 15 : 31;
  float v;
  if (f == Format::e4m3 && e == top && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (f == Format::e5m2 && e == top)
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(float(m), 1 - bias - mant_bits);
  else
    v = std::ldexp(float((1 << mant_bits) + m), e - bias - mant_bits);
  return neg ? -v : v;
}

float amax(const float* x, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::abs(x[i]);  // max |x|: a positive NaN, as torch's abs().max()
    a = std::max(a, std::abs(x[i]));
  }
  return a;
}

float tensorwise_scale(Format f, float a, bool power_of_two) {
  float s = float(double(max_of(f)) / std::max(double(a), 1e-12));
  if (power_of_two) s = std::exp2(std::floor(std::log2(s)));
  return s;
}

void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = encode_saturated(f, x[i] * scale);
}

void dequantize(Format f, const uint8_t* q, int64_t n, float scale, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = decode(f, q[i]) / scale;
}

void DelayedScale::update(float step_amax) {
  amaxes.push_back(step_amax);
  if (int64_t(amaxes.size()) > history) amaxes.erase(amaxes.begin());
  float a = 0;
  bool finite = true;
  for (float v : amaxes) finite = finite && std::isfinite(v), a = std::max(a, v);
  if (!finite || !(a > 0)) return;                        // Transformer Engine keeps the scale
  scale = max_of(format) / a / float(std::exp2(margin));  // float32 arithmetic, as Transformer Engine
}

namespace {

// One tile's or block's scale: amax / 448 (ue8m0: the power of two at or above it).
float block_scale(float a, bool power_of_two) {
  float s = a / kMaxE4m3;
  if (power_of_two && s > 0) s = std::exp2(std::ceil(std::log2(s)));
  return s;
}

// A tile of zeros (s = 0) quantises to zeros, not to the reference's 0 / 0 = NaN.
uint8_t quantize_one(float x, float s) { return s == 0 ? uint8_t(0) : encode_saturated(Format::e4m3, x / s); }

void check_blocks(int64_t rows, int64_t cols, bool square) {
  TRIDENT_CHECK(cols % kBlock == 0 && (!square || rows % kBlock == 0),
                "blockwise FP8 needs {} x {} to be multiples of {}", rows, cols, kBlock);
}

}  // namespace

void quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  check_blocks(rows, cols, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < cols / kBlock; ++t) {
      const float* in = x + r * cols + t * kBlock;
      const float s = block_scale(amax(in, kBlock), power_of_two);
      scales[r * (cols / kBlock) + t] = s;
      for (int64_t i = 0; i < kBlock; ++i) q[r * cols + t * kBlock + i] = quantize_one(in[i], s);
    }
}

void quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  check_blocks(rows, cols, true);
  const int64_t bc = cols / kBlock;
  for (int64_t br = 0; br < rows / kBlock; ++br)
    for (int64_t c = 0; c < bc; ++c) {
      float a = 0;
      for (int64_t r = br * kBlock; r < (br + 1) * kBlock; ++r) {
        const float m = amax(x + r * cols + c * kBlock, kBlock);
        if (!std::isnan(a)) a = std::isnan(m) ? m : std::max(a, m);  // a NaN anywhere makes the block's NaN
      }
      const float s = block_scale(a, power_of_two);
      scales[br * bc + c] = s;
      for (int64_t r = br * kBlock; r < (br + 1) * kBlock; ++r)
        for (int64_t i = c * kBlock; i < (c + 1) * kBlock; ++i) q[r * cols + i] = quantize_one(x[r * cols + i], s);
    }
}

void dequantize_tiles(const uint8_t* q, int64_t rows, int64_t cols, const float* scales, float* y) {
  check_blocks(rows, cols, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i)
      y[r * cols + i] = decode(Format::e4m3, q[r * cols + i]) * scales[r * (cols / kBlock) + i / kBlock];
}

void dequantize_blocks(const uint8_t* q, int64_t rows, int64_t cols, const float* scales, float* y) {
  check_blocks(rows, cols, true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i)
      y[r * cols + i] = decode(Format::e4m3, q[r * cols + i]) * scales[(r / kBlock) * (cols / kBlock) + i / kBlock];
}

void fake_quantize(Format f, const float* x, int64_t n, float scale, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = decode(f, encode_saturated(f, x[i] * scale)) / scale;
}

void fake_quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  std::vector<uint8_t> q(size_t(rows * cols));
  std::vector<float> s(size_t(rows * (cols / kBlock)));
  quantize_tiles(x, rows, cols, power_of_two, q.data(), s.data());
  dequantize_tiles(q.data(), rows, cols, s.data(), y);
}

void fake_quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  std::vector<uint8_t> q(size_t(rows * cols));
  std::vector<float> s(size_t((rows / kBlock) * (cols / kBlock)));
  quantize_blocks(x, rows, cols, power_of_two, q.data(), s.data());
  dequantize_blocks(q.data(), rows, cols, s.data(), y);
}

}  // namespace trident::kernels::fp8
