// Dequantizing released checkpoints' FP8 and MXFP4 weights (see quantized.hpp).
#include "launch/checkpoint/quantized.hpp"

#include <fmt/ranges.h>

#include <cmath>

#include "core/error.hpp"

namespace trident::launch {

float fp8_e4m3_value(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  if (exp == 15 && man == 7) return NAN;
  const float mag = exp == 0 ? std::ldexp(float(man) / 8.0f, -6) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

float fp4_e2m1_value(uint8_t code) {
  static const float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kValues[code & 7];
  return code & 8 ? -mag : mag;
}

namespace {

// The entry `name` of r, of the dtype and shape expected.
const SafetensorsEntry& entry(const SafetensorsReader& r, const std::string& name, DType dtype, const Shape& shape) {
  const SafetensorsEntry& e = r.at(name);
  if (e.dtype != dtype)
    fail_input("{}: tensor '{}': expected dtype {}, found {}", r.path(), name, safetensors_dtype(dtype),
               safetensors_dtype(e.dtype));
  if (e.shape != shape)
    fail_input("{}: tensor '{}': expected shape [{}], found [{}]", r.path(), name, fmt::join(shape, ","),
               fmt::join(e.shape, ","));
  return e;
}

template <typename V>
std::vector<V> bytes_of(const SafetensorsReader& r, const std::string& name, const SafetensorsEntry& e) {
  std::vector<V> v(size_t(shape_numel(e.shape)));
  r.read(name, v.data());
  return v;
}

}  // namespace

std::vector<float> read_fp8_block_scaled(const SafetensorsReader& r, const std::string& name,
                                         const SafetensorsReader& rs, const std::string& scale_name,
                                         const Shape& expected) {
  constexpr int64_t kBlock = 128;
  if (expected.size() != 2) fail_input("{}: tensor '{}': FP8 block scaling is for matrices", r.path(), name);
  const int64_t rows = expected[0], cols = expected[1];
  const auto w = bytes_of<uint8_t>(r, name, entry(r, name, DType::f8_e4m3, expected));
  const Shape grid = {(rows + kBlock - 1) / kBlock, (cols + kBlock - 1) / kBlock};
  const auto s = bytes_of<float>(rs, scale_name, entry(rs, scale_name, DType::f32, grid));
  for (size_t i = 0; i < s.size(); ++i)
    if (!std::isfinite(s[i]))
      fail_input("{}: tensor '{}': element {} (block [{}, {}]) is {}", rs.path(), scale_name, i, int64_t(i) / grid[1],
                 int64_t(i) % grid[1], s[i]);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const uint8_t code = w[size_t(i * cols + j)];
      if ((code & 0x7f) == 0x7f)
        fail_input("{}: tensor '{}': element [{}, {}] is the FP8 NaN code 0x{:02x}", r.path(), name, i, j, code);
      out[size_t(i * cols + j)] = fp8_e4m3_value(code) * s[size_t(i / kBlock * grid[1] + j / kBlock)];
    }
  return out;
}

std::vector<float> read_mxfp4(const SafetensorsReader& rb, const std::string& blocks, const SafetensorsReader& rs,
                              const std::string& scales, const Shape& expected) {
  if (expected.empty() || expected.back() % 32 != 0)
    fail_input("{}: tensor '{}': MXFP4 rows hold groups of 32 values, the model's last dimension is [{}]", rb.path(),
               blocks, fmt::join(expected, ","));
  Shape grid(expected.begin(), expected.end() - 1);
  grid.push_back(expected.back() / 32);
  Shape packed = grid;
  packed.push_back(16);
  const auto b = bytes_of<uint8_t>(rb, blocks, entry(rb, blocks, DType::u8, packed));
  const auto e = bytes_of<uint8_t>(rs, scales, entry(rs, scales, DType::u8, grid));
  std::vector<float> out(size_t(shape_numel(expected)));
  for (size_t g = 0; g < e.size(); ++g) {
    const int exp = int(e[g]) - 127;
    for (int k = 0; k < 16; ++k) {
      const uint8_t byte = b[g * 16 + size_t(k)];
      for (int half = 0; half < 2; ++half) {
        const float v = std::ldexp(fp4_e2m1_value(half ? byte >> 4 : byte & 15), exp);
        if (!std::isfinite(v))
          fail_input("{}: tensor '{}': group {} has scale {} (2^{}), which overflows float32", rs.path(), scales, g,
                     int(e[g]), exp);
        out[g * 32 + size_t(2 * k + half)] = v;
      }
    }
  }
  return out;
}

}  // namespace trident::launch
