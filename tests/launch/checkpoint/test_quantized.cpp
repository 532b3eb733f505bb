// The released checkpoints' quantized weights (launch/checkpoint/quantized.hpp):
// every FP8 e4m3fn and FP4 e2m1 code against its value from the formats'
// definitions (the float's bits built directly); block-scaled FP8 over a
// ragged 3 x 3 grid of 128 x 128 blocks and MXFP4 groups dequantize to the
// values written; a damaged tensor (its scale grid, a NaN code, a scale that
// overflows, the wrong dtype) is refused naming the file and the tensor.
// tests/launch/test_interop.cpp imports whole quantized checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "launch/checkpoint/quantized.hpp"
#include "tests/test_util.hpp"

namespace trident::launch {
namespace {

namespace fs = std::filesystem;

using test::fp8_e4m3_by_bits;

TEST(Quantized, EveryCodeHasItsValue) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_value(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(v, fp8_e4m3_by_bits(uint8_t(c))) << "code " << c;
  }
  EXPECT_EQ(fp8_e4m3_value(0x7e), 448.0f);   // the largest
  EXPECT_EQ(fp8_e4m3_value(0x01), 0x1p-9f);  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_value(0x38), 1.0f);
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(fp4_e2m1_value(uint8_t(c)), fp4[c]) << c;
}

struct Files {
  std::string dir = (fs::temp_directory_path() / ("trident_quantized_" + std::to_string(::getpid()))).string();
  Files() { fs::create_directories(dir); }
  ~Files() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::vector<SafetensorsInput>& ts) const {
    write_safetensors(dir + "/" + name, ts);
    return dir + "/" + name;
  }
};

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Quantized, BlockScaledFp8DequantizesExactly) {
  Files files;
  const int64_t rows = 130, cols = 260;  // 2 x 3 blocks, the last of each ragged
  std::vector<uint8_t> w(size_t(rows * cols));
  uint32_t x = 12345;
  for (auto& c : w) {
    x = x * 1664525u + 1013904223u;
    c = uint8_t(x >> 24);
    if ((c & 0x7f) == 0x7f) c = 0x7e;  // not NaN
  }
  std::vector<float> scale = {0.5f, 3e-3f, 1.25f, 7.0f, 0x1p-20f, 0.1f};  // [2, 3]
  const std::string f = files.write("w.safetensors", {{"q.weight", DType::f8_e4m3, {rows, cols}, w.data()},
                                                      {"q.weight_scale_inv", DType::f32, {2, 3}, scale.data()}});
  SafetensorsReader r(f);
  const std::vector<float> v = read_fp8_block_scaled(r, "q.weight", r, "q.weight_scale_inv", {rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      ASSERT_EQ(v[size_t(i * cols + j)], fp8_e4m3_by_bits(w[size_t(i * cols + j)]) * scale[size_t(i / 128 * 3 + j / 128)])
          << i << ", " << j;
  // damaged: the scale grid, a NaN code, the dtype
  const std::string grid = files.write("grid.safetensors", {{"q.weight", DType::f8_e4m3, {rows, cols}, w.data()},
                                                            {"q.weight_scale_inv", DType::f32, {3, 2}, scale.data()}});
  SafetensorsReader g(grid);
  EXPECT_NE(refusal([&] {
              read_fp8_block_scaled(g, "q.weight", g, "q.weight_scale_inv", {rows, cols});
            }).find("grid.safetensors: tensor 'q.weight_scale_inv': expected shape [2,3], found [3,2]"),
            std::string::npos);
  w[777] = 0xff;
  const std::string nan = files.write("nan.safetensors", {{"q.weight", DType::f8_e4m3, {rows, cols}, w.data()},
                                                          {"q.weight_scale_inv", DType::f32, {2, 3}, scale.data()}});
  SafetensorsReader n(nan);
  EXPECT_NE(refusal([&] {
              read_fp8_block_scaled(n, "q.weight", n, "q.weight_scale_inv", {rows, cols});
            }).find("nan.safetensors: tensor 'q.weight': element [2, 257] is the FP8 NaN code 0xff"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              read_fp8_block_scaled(r, "q.weight_scale_inv", r, "q.weight_scale_inv", {2, 3});
            }).find("tensor 'q.weight_scale_inv': expected dtype F8_E4M3, found F32"),
            std::string::npos);
}

TEST(Quantized, Mxfp4DequantizesExactly) {
  Files files;
  const int64_t E = 2, R = 3, G = 2;  // [2, 3, 64] values
  std::vector<uint8_t> blocks(size_t(E * R * G * 16)), scales(size_t(E * R * G));
  uint32_t x = 99;
  for (auto& b : blocks) x = x * 1664525u + 1013904223u, b = uint8_t(x >> 24);
  for (size_t g = 0; g < scales.size(); ++g) scales[g] = uint8_t(110 + 3 * g);  // 2^-17 .. 2^16
  const std::string f = files.write("e.safetensors", {{"x_blocks", DType::u8, {E, R, G, 16}, blocks.data()},
                                                      {"x_scales", DType::u8, {E, R, G}, scales.data()}});
  SafetensorsReader r(f);
  const std::vector<float> v = read_mxfp4(r, "x_blocks", r, "x_scales", {E, R, G * 32});
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int64_t i = 0; i < E * R * G * 32; ++i) {  // value i: byte i / 2 of its group, the lower nibble first
    const uint8_t byte = blocks[size_t(i / 2)];
    const float want = fp4[i % 2 ? byte >> 4 : byte & 15] * std::exp2(float(int(scales[size_t(i / 32)]) - 127));
    ASSERT_EQ(v[size_t(i)], want) << i;
  }
  EXPECT_NE(refusal([&] {
              read_mxfp4(r, "x_blocks", r, "x_scales", {E, R, 96});
            }).find("e.safetensors: tensor 'x_blocks': expected shape [2,3,3,16], found [2,3,2,16]"),
            std::string::npos);
  scales[4] = 255, blocks[4 * 16] = 0x77;  // 6 x 2^128 in group 4
  const std::string big = files.write("big.safetensors", {{"x_blocks", DType::u8, {E, R, G, 16}, blocks.data()},
                                                          {"x_scales", DType::u8, {E, R, G}, scales.data()}});
  SafetensorsReader b(big);
  const std::string msg = refusal([&] { read_mxfp4(b, "x_blocks", b, "x_scales", {E, R, G * 32}); });
  EXPECT_NE(msg.find("big.safetensors: tensor 'x_scales': group 4 has scale 255 (2^128), which overflows float32"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace trident::launch
