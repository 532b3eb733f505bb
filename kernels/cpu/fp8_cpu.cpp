// FP8 numbers and scalings on the CPU (see kernels/fp8.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kernels/fp8.hpp"
#include "kernels/fp8_code.hpp"

namespace trident::kernels::fp8 {

uint8_t encode(Format f, float x) { return fp8_code::encode(f == Format::e4m3 ? 0 : 1, x); }
uint8_t encode_saturated(Format f, float x) { return fp8_code::encode_saturated(f == Format::e4m3 ? 0 : 1, x); }
float decode(Format f, uint8_t b) { return fp8_code::decode(f == Format::e4m3 ? 0 : 1, b); }

float tensorwise_scale(Format f, float a, bool power_of_two) {
  float s = float(double(max_of(f)) / std::max(double(a), 1e-12));
  if (power_of_two) s = std::exp2(std::floor(std::log2(s)));
  return s;
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
  if (power_of_two && s > 0 && std::isfinite(s)) s = fp8_code::pow2_at_or_above(s);
  return s;
}

// A tile of zeros (s = 0) quantises to zeros, not to the reference's 0 / 0 = NaN.
uint8_t quantize_one(float x, float s) { return s == 0 ? uint8_t(0) : encode_saturated(Format::e4m3, x / s); }

void check_blocks(int64_t rows, int64_t cols, bool square) {
  TRIDENT_CHECK(cols % kBlock == 0 && (!square || rows % kBlock == 0),
                "blockwise FP8 needs {} x {} to be multiples of {}", rows, cols, kBlock);
}

}  // namespace

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

namespace cpu {

float amax(const float* x, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::abs(x[i]);  // max |x|: a positive NaN, as torch's abs().max()
    a = std::max(a, std::abs(x[i]));
  }
  return a;
}

void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = encode_saturated(f, x[i] * scale);
}

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

}  // namespace cpu

}  // namespace trident::kernels::fp8
