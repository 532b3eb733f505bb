// FP8 numbers and scalings on the CPU (see kernels/fp8.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kernels/fp8.hpp"
#include "kernels/fp8_code.hpp"
#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"

namespace trident::kernels::fp8 {

uint8_t encode(Format f, float x) { return fp8_code::encode(f == Format::e4m3 ? 0 : 1, x); }
uint8_t encode_saturated(Format f, float x) { return fp8_code::encode_saturated(f == Format::e4m3 ? 0 : 1, x); }
float decode(Format f, uint8_t b) { return fp8_code::decode(f == Format::e4m3 ? 0 : 1, b); }

float tensorwise_scale(Format f, float a, bool power_of_two) {
  float s = float(double(max_of(f)) / std::max(double(a), 1e-12));
  if (power_of_two) s = std::exp2(std::floor(std::log2(s)));
  return s;
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

// The hot loops (the FP8 GEMMs' operands every step): inline casts with the
// format fixed, decoding through a table of the 256 codes (decode's values),
// threads over large tensors.
constexpr int64_t kThreaded = int64_t(1) << 15;

struct DecodeTable {
  float v[2][256];
  DecodeTable() {
    for (int f = 0; f < 2; ++f)
      for (int b = 0; b < 256; ++b) v[f][b] = fp8_code::decode(f, uint8_t(b));
  }
};
const DecodeTable& table() {
  static const DecodeTable t;
  return t;
}

template <int F>
void fake_quantize_n(const float* x, int64_t n, float scale, float* y) {
  const float* dec = table().v[F];
#pragma omp parallel for if (n >= kThreaded) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = dec[fp8_code::encode_saturated(F, x[i] * scale)] / scale;
}

// One tile's or block's scale: amax / 448 (ue8m0: the power of two at or above it).
float block_scale(float a, bool power_of_two) {
  float s = a / kMaxE4m3;
  if (power_of_two && s > 0 && std::isfinite(s)) s = fp8_code::pow2_at_or_above(s);
  return s;
}

// A tile of zeros (s = 0) quantises to zeros, not to the reference's 0 / 0 = NaN.
inline uint8_t quantize_one(float x, float s) { return s == 0 ? uint8_t(0) : fp8_code::encode_saturated(0, x / s); }

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
  bool nan = false;
#pragma omp parallel for if (n >= kThreaded) reduction(max : a) reduction(|| : nan) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::abs(x[i]);
    nan = nan || v != v;
    a = v > a ? v : a;
  }
  // max |x|: a positive NaN, as torch's abs().max()
  return nan ? std::numeric_limits<float>::quiet_NaN() : a;
}

void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = encode_saturated(f, x[i] * scale);
}

void dequantize(Format f, const uint8_t* q, int64_t n, float scale, float* y) {
  const float* dec = table().v[f == Format::e4m3 ? 0 : 1];
#pragma omp parallel for if (n >= kThreaded) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = dec[q[i]] / scale;
}

// One tile's amax keeps NaN: a NaN anywhere makes the tile's scale NaN.
void quantize_tiled(const float* x, int64_t rows, int64_t cols, Tile t, bool power_of_two, uint8_t* q, float* y,
                    float* scales) {
  const int64_t grid_rows = (rows + t.rows - 1) / t.rows, grid_cols = (cols + t.cols - 1) / t.cols;
  const float* dec = table().v[0];
#pragma omp parallel for if (rows * cols >= kThreaded) schedule(static)
  for (int64_t i = 0; i < grid_rows * grid_cols; ++i) {
    const int64_t r0 = i / grid_cols * t.rows, c0 = i % grid_cols * t.cols;
    const int64_t r1 = std::min(rows, r0 + t.rows), c1 = std::min(cols, c0 + t.cols);
    float a = 0;
    bool nan = false;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const float v = std::abs(x[r * cols + c]);
        nan = nan || v != v;
        a = v > a ? v : a;
      }
    const float s = block_scale(nan ? std::numeric_limits<float>::quiet_NaN() : a, power_of_two);
    if (scales) scales[i] = s;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const uint8_t b = quantize_one(x[r * cols + c], s);
        if (q) q[r * cols + c] = b;
        if (y) y[r * cols + c] = dec[b] * s;
      }
  }
}

int64_t count_saturated(Format f, const float* x, int64_t n, float scale) {
  const float m = max_of(f);
  int64_t k = 0;
#pragma omp parallel for if (n >= kThreaded) reduction(+ : k) schedule(static)
  for (int64_t i = 0; i < n; ++i) k += std::abs(x[i] * scale) > m;
  return k;
}

void quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  check_blocks(rows, cols, false);
  cpu::quantize_tiled(x, rows, cols, kRowTile, power_of_two, q, nullptr, scales);
}

void quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  check_blocks(rows, cols, true);
  cpu::quantize_tiled(x, rows, cols, kSquareBlock, power_of_two, q, nullptr, scales);
}

void fake_quantize(Format f, const float* x, int64_t n, float scale, float* y) {
  if (f == Format::e4m3)
    fake_quantize_n<0>(x, n, scale, y);
  else
    fake_quantize_n<1>(x, n, scale, y);
}

void fake_quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  check_blocks(rows, cols, false);
  cpu::quantize_tiled(x, rows, cols, kRowTile, power_of_two, nullptr, y, nullptr);
}

void fake_quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  check_blocks(rows, cols, true);
  cpu::quantize_tiled(x, rows, cols, kSquareBlock, power_of_two, nullptr, y, nullptr);
}

// Each operand decoded into a float32 buffer of this thread's (kept, grown as needed), then the float32 GEMM.
const float* decoded(int slot, Operand8 a, int64_t n) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& b = buf[slot];
  if (int64_t(b.size()) < n) b.resize(size_t(n));
  cpu::dequantize(a.format, a.q, n, a.scale, b.data());
  return b.data();
}

void linear_forward8(float* out, Operand8 x, Operand8 w, const float* bias, int64_t N, int64_t C, int64_t OC) {
  kernels::linear_forward(out, decoded(0, x, N * C), decoded(1, w, OC * C), bias, N, C, OC, Precision::fp32);
}

void linear_dgrad8(float* dinp, Operand8 dout, Operand8 w, int64_t N, int64_t C, int64_t OC) {
  kernels::linear_backward(dinp, static_cast<float*>(nullptr), static_cast<float*>(nullptr), decoded(0, dout, N * OC),
                           static_cast<const float*>(nullptr), decoded(1, w, OC * C), N, C, OC, false, Precision::fp32);
}

void linear_wgrad8(float* dweight, Operand8 dout, Operand8 x, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  kernels::linear_backward(static_cast<float*>(nullptr), dweight, static_cast<float*>(nullptr),
                           decoded(0, dout, N * OC), decoded(1, x, N * C), static_cast<const float*>(nullptr), N, C, OC,
                           accumulate, Precision::fp32);
}

void dequantize_tiled(const uint8_t* q, int64_t rows, int64_t cols, Tile t, const float* factors, float* y) {
  const int64_t grid_cols = (cols + t.cols - 1) / t.cols;
  const float* dec = table().v[0];
#pragma omp parallel for if (rows * cols >= kThreaded) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = dec[q[r * cols + c]] * factors[(r / t.rows) * grid_cols + c / t.cols];
}

// A blockwise operand decoded into this thread's float32 buffer (kept, grown as needed).
const float* decoded_tiles(int slot, Tiled8 a, int64_t rows, int64_t cols, Tile t) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& b = buf[slot];
  if (int64_t(b.size()) < rows * cols) b.resize(size_t(rows * cols));
  cpu::dequantize_tiled(a.q, rows, cols, t, a.factors, b.data());
  return b.data();
}

void linear_forward8b(float* out, Tiled8 x, Tiled8 w, const float* bias, int64_t N, int64_t C, int64_t OC) {
  kernels::linear_forward(out, decoded_tiles(0, x, N, C, kRowTile), decoded_tiles(1, w, OC, C, kSquareBlock), bias, N,
                          C, OC, Precision::fp32);
}

void linear_dgrad8b(float* dinp, Tiled8 dout, Tiled8 w, int64_t N, int64_t C, int64_t OC) {
  kernels::linear_backward(dinp, static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                           decoded_tiles(0, dout, N, OC, kRowTile), static_cast<const float*>(nullptr),
                           decoded_tiles(1, w, OC, C, kSquareBlock), N, C, OC, false, Precision::fp32);
}

void linear_wgrad8b(float* dweight, Tiled8 dout, Tiled8 x, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  kernels::linear_backward(static_cast<float*>(nullptr), dweight, static_cast<float*>(nullptr),
                           decoded_tiles(0, dout, N, OC, kColumnTile), decoded_tiles(1, x, N, C, kColumnTile),
                           static_cast<const float*>(nullptr), N, C, OC, accumulate, Precision::fp32);
}

void grouped_linear_forward8(float* y, const uint8_t* x, Format fx, const float* x_scales, const uint8_t* w, Format fw,
                             const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC) {
  thread_local std::vector<float> xd, wd;
  if (int64_t(xd.size()) < offsets[G] * C) xd.resize(size_t(offsets[G] * C));
  if (int64_t(wd.size()) < G * OC * C) wd.resize(size_t(G * OC * C));
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    cpu::dequantize(fx, x + r0 * C, rows * C, x_scales[g], xd.data() + r0 * C);
    cpu::dequantize(fw, w + g * OC * C, OC * C, w_scales[g], wd.data() + g * OC * C);
  }
  kernels::grouped_linear_forward(y, xd.data(), wd.data(), offsets, G, C, OC, Precision::fp32);
}

}  // namespace cpu

}  // namespace trident::kernels::fp8
