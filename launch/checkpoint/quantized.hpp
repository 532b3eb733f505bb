// The quantized weights of released checkpoints, dequantized on import as
// their own reference code computes them (docs/checkpoint.md#quantized-weights):
//   FP8 block-scaled (DeepSeek-V3, V3.1, R1, Kimi-K2): `X.weight` in
//     F8_E4M3 [rows, cols] with `X.weight_scale_inv` in F32 [ceil(rows /
//     128), ceil(cols / 128)]: w = fp8 x scale of its 128 x 128 block, in
//     float32 (DeepSeek's weight_dequant, before its cast to bf16).
//   MXFP4 (gpt-oss's experts): `X_blocks` in U8 [..., G, 16], 32 FP4 (e2m1)
//     values per group of 16 bytes, the lower nibble first, with `X_scales`
//     in U8 [..., G] (e8m0): w = fp4 x 2^(scale - 127), the groups of a row
//     back to back: [..., G x 32] (transformers' convert_moe_packed_tensors,
//     before its transpose).
// Each reads what it is given and checks it: dtypes, the shapes against the
// expected ones, the scale grid's size; a damaged tensor (wrong shape, a
// NaN code, a scale that overflows) is an InputError naming the file and
// the tensor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/safetensors.hpp"

namespace trident::launch {

// One FP8 e4m3fn code (sign, 4 exponent bits of bias 7, 3 mantissa bits;
// S.1111.111 is NaN, there is no infinity).
float fp8_e4m3_value(uint8_t code);
// One FP4 e2m1 code (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives).
float fp4_e2m1_value(uint8_t code);

// The weight `name` of reader r (F8_E4M3 of the expected shape) with its
// `name_scale_inv` of reader rs: [rows, cols] floats.
std::vector<float> read_fp8_block_scaled(const SafetensorsReader& r, const std::string& name,
                                         const SafetensorsReader& rs, const std::string& scale_name,
                                         const Shape& expected);
// `blocks` of rb and `scales` of rs, whose values are `expected` ([..., K]
// with K = 32 G): the dequantized values in that shape.
std::vector<float> read_mxfp4(const SafetensorsReader& rb, const std::string& blocks, const SafetensorsReader& rs,
                              const std::string& scales, const Shape& expected);

}  // namespace trident::launch
