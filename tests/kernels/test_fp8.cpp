// FP8 numbers and scalings (kernels/fp8.hpp) by their own definitions; the
// bit-for-bit comparison with PyTorch, torchao and DeepSeek-V3's reference
// is tests/model/fp8 (ctest: fp8_reference).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fp8.hpp"

namespace trident::kernels::fp8 {
namespace {

const float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();

// Every code's value encodes back to the code (NaNs to the format's NaN,
// e5m2's infinities to themselves); the values rise with the codes.
TEST(Fp8, EveryCodeRoundTrips) {
  for (Format f : {Format::e4m3, Format::e5m2}) {
    float last = -1;
    for (int b = 0; b < 128; ++b) {
      const float v = decode(f, uint8_t(b));
      if (std::isnan(v)) {
        EXPECT_EQ(encode(f, v), 0x7f) << b;
        continue;
      }
      EXPECT_EQ(encode(f, v), b) << int(f) << " code " << b << " = " << v;
      EXPECT_EQ(encode(f, -v), b == 0 ? 0x80 : b | 0x80) << b;
      EXPECT_GT(v, last) << b;
      last = v;
    }
  }
  EXPECT_EQ(decode(Format::e4m3, 0x7e), 448.0f);
  EXPECT_EQ(decode(Format::e4m3, 0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(decode(Format::e5m2, 0x7b), 57344.0f);
  EXPECT_EQ(decode(Format::e5m2, 0x7c), kInf);
  EXPECT_EQ(decode(Format::e5m2, 0x01), std::ldexp(1.0f, -16));
}

// Halfway between two neighbours goes to the even code; a hair either side
// to the nearer one, subnormals included.
TEST(Fp8, RoundsToNearestEven) {
  for (Format f : {Format::e4m3, Format::e5m2})
    for (int b = 0; b + 1 < 0x7b; ++b) {
      const float lo = decode(f, uint8_t(b)), hi = decode(f, uint8_t(b + 1));
      if (!std::isfinite(hi)) break;
      const float mid = float((double(lo) + double(hi)) / 2);
      EXPECT_EQ(encode(f, mid), b % 2 == 0 ? b : b + 1) << int(f) << " between " << lo << " and " << hi;
      EXPECT_EQ(encode(f, std::nextafter(mid, 0.0f)), b) << mid;
      EXPECT_EQ(encode(f, std::nextafter(mid, kInf)), b + 1) << mid;
    }
}

// e4m3 has no infinity: past 448's range and at infinity it saturates;
// e5m2 rounds past 57344 to infinity unless saturated; NaN stays NaN.
TEST(Fp8, OverflowAndSpecials) {
  EXPECT_EQ(encode(Format::e4m3, 463.9f), 0x7e);
  EXPECT_EQ(encode(Format::e4m3, 1e6f), 0x7e);
  EXPECT_EQ(encode(Format::e4m3, kInf), 0x7e);
  EXPECT_EQ(encode(Format::e4m3, -kInf), 0xfe);
  EXPECT_EQ(encode(Format::e4m3, kNaN), 0x7f);
  EXPECT_EQ(encode(Format::e5m2, 61439.0f), 0x7b);
  EXPECT_EQ(encode(Format::e5m2, 61440.0f), 0x7c);
  EXPECT_EQ(encode(Format::e5m2, -1e30f), 0xfc);
  EXPECT_EQ(encode_saturated(Format::e5m2, kInf), 0x7b);
  EXPECT_EQ(encode_saturated(Format::e5m2, -1e30f), 0xfb);
  EXPECT_TRUE(std::isnan(decode(Format::e5m2, encode_saturated(Format::e5m2, kNaN))));
  EXPECT_EQ(encode(Format::e4m3, std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: to even (zero)
  EXPECT_EQ(encode(Format::e4m3, std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
}

// Scales: torchao's tensorwise (max / amax, floored at 1e-12, a power of two
// rounded down), Transformer Engine's delayed (the history's max, a margin,
// kept on a zero or non-finite amax), DeepSeek's blocks (amax / 448).
TEST(Fp8, Scales) {
  EXPECT_EQ(tensorwise_scale(Format::e4m3, 2.0f), 224.0f);
  EXPECT_EQ(tensorwise_scale(Format::e4m3, 3.0f, true), 128.0f);
  EXPECT_EQ(tensorwise_scale(Format::e5m2, 0.0f), float(57344.0 / 1e-12));
  const std::vector<float> x = {0.5f, -3.0f, 1.25f};
  EXPECT_EQ(amax(x.data(), 3), 3.0f);
  std::vector<uint8_t> q(3);
  std::vector<float> back(3);
  const float s = tensorwise_scale(Format::e4m3, 3.0f);
  quantize(Format::e4m3, x.data(), 3, s, q.data());
  dequantize(Format::e4m3, q.data(), 3, s, back.data());
  EXPECT_EQ(q[1], 0xfe);  // -3 x 448/3 = -448
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back[size_t(i)], x[size_t(i)], std::abs(x[size_t(i)]) / 16);

  DelayedScale d;
  d.history = 2, d.margin = 1;
  EXPECT_EQ(d.scale, 1.0f);
  d.update(4.0f);
  EXPECT_EQ(d.scale, 56.0f);  // 448 / 4 / 2
  d.update(0.0f);
  EXPECT_EQ(d.scale, 56.0f);  // the history still holds 4
  d.update(0.0f);
  EXPECT_EQ(d.scale, 56.0f);  // all zero: kept
  d.update(kInf);
  EXPECT_EQ(d.scale, 56.0f);  // not finite: kept
  d.update(7.0f);
  EXPECT_EQ(d.scale, 56.0f);  // inf still in the history
  d.update(7.0f);
  EXPECT_EQ(d.scale, 32.0f);

  std::vector<float> w(2 * 256, 0.0f), scales(4), y(w.size());
  std::vector<uint8_t> code(w.size());
  for (int i = 0; i < 128; ++i) w[size_t(128 + i)] = float(i) - 60.0f;  // row 0, tile 1: amax 67
  quantize_tiles(w.data(), 2, 256, false, code.data(), scales.data());
  EXPECT_EQ(scales[0], 0.0f);  // a tile of zeros
  EXPECT_EQ(scales[1], 67.0f / 448.0f);
  EXPECT_EQ(code[128 + 127], 0x7e);  // the amax lands on 448
  dequantize_tiles(code.data(), 2, 256, scales.data(), y.data());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(y[i], w[i], std::abs(w[i]) / 16 + 1e-6) << i;
  quantize_tiles(w.data(), 2, 256, true, code.data(), scales.data());
  EXPECT_EQ(scales[1], 0.25f);  // 67 / 448 = 0.1496: the power of two above
}

}  // namespace
}  // namespace trident::kernels::fp8
