// FP8 numbers and the scalings of the FP8 training recipes (train.fp8,
// docs/precision.md#fp8), on the CPU. These are the definitions the other
// implementations are checked against (tests/model/fp8: bit for bit
// against PyTorch's float8 casts, torchao's tensorwise scaling and
// DeepSeek-V3's blockwise quantisation).
//
// Formats (OCP FP8): e4m3 (PyTorch's float8_e4m3fn: bias 7, no infinity, the
// largest finite 448, 0x7f / 0xff NaN) and e5m2 (bias 15, IEEE-like: the
// largest finite 57344, 0x7c infinity). A byte per value.
//
// Casts, as PyTorch (2.12 and later) casts float32 to float8: round to
// nearest, ties to even (subnormals included). e4m3 saturates: a finite
// value beyond 448's rounding range and an infinity become +-448; NaN
// becomes NaN. e5m2 rounds past 57344 to infinity as IEEE arithmetic does.
// `saturated` clamps to +-max first (torchao's to_fp8_saturated,
// Transformer Engine's casts): no infinity from either format.
//
// Scalings (the scale multiplies to go from the high-precision range into
// FP8's, and divides on the way back, as torchao and Transformer Engine
// define it; DeepSeek-V3 stores the reciprocal, the dequantisation
// multiplier, and so does blockwise here):
//   tensorwise (torchao Float8Linear, current scaling): amax = max |x| in
//     float32; scale = float32(max_fp8 / max(float64(amax), 1e-12))
//     (float64 division, as torchao); optionally rounded down to a power
//     of two; q = saturated(float32(x) * scale); x' = float(q) / scale.
//   delayed (Transformer Engine's DelayedScaling, amax_compute_algo max):
//     a tensor is cast with the scale made from the amax history of the
//     steps before; after the step its amax joins the history (the last
//     `amax_history` steps) and scale = (max_fp8 / max(history)) / 2^margin
//     (float32 arithmetic),
//     kept as it was when that amax is 0 or not finite; the first scale 1.
//   blockwise (DeepSeek-V3, inference/kernel.py act_quant / weight_dequant,
//     and Megatron-Core's blockwise recipe): activations and gradients in
//     1 x 128 tiles along their rows, weights in 128 x 128 blocks; per tile
//     s = amax / 448 (float32; the power of two at or above it, exactly,
//     with `power_of_two`: DeepSeek's ue8m0 scale format), q = e4m3(x / s)
//     (IEEE division), x' = float(q) * s. A tile of zeros has s = 0 and
//     quantises to zeros, where the reference's 0 / 0 makes NaN (later
//     DeepSeek kernels clamp amax at 1e-4 for the same reason).
//
// Where they run: amax, quantize, dequantize, fake_quantize and the
// blockwise quantisations run on the buffer's device (the CUDA twins of
// kernels/cuda/fp8_cuda.cu for device memory, the same bits;
// kernels/device_choice.cpp); the blockwise dequantisations and the
// scalars are the host's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace trident::kernels::fp8 {

enum class Format { e4m3, e5m2 };
inline constexpr float kMaxE4m3 = 448.0f, kMaxE5m2 = 57344.0f;
inline constexpr float max_of(Format f) { return f == Format::e4m3 ? kMaxE4m3 : kMaxE5m2; }

uint8_t encode(Format f, float x);            // PyTorch's cast
uint8_t encode_saturated(Format f, float x);  // clamped to +-max first
float decode(Format f, uint8_t b);            // exact

// max |x| over n values (NaN if any is NaN).
float amax(const float* x, int64_t n);

// tensorwise: the scale for amax (torchao's amax_to_scale).
float tensorwise_scale(Format f, float amax, bool power_of_two = false);
// q[i] = saturated(x[i] * scale); and back: y[i] = decode(q[i]) / scale.
void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q);
void dequantize(Format f, const uint8_t* q, int64_t n, float scale, float* y);

// delayed scaling's state for one tensor (Transformer Engine's).
struct DelayedScale {
  int64_t history = 16;  // amax_history: steps kept
  double margin = 0;
  Format format = Format::e4m3;
  float scale = 1.0f;            // what this step casts with
  std::vector<float> amaxes;     // the last `history` steps' amax, oldest first
  void update(float step_amax);  // after the step: its amax joins the history, the scale is made anew
};

// blockwise, 1 x 128 tiles along rows of `cols` values (cols % 128 == 0):
// scales[r * cols / 128 + t] and q, e4m3. And 128 x 128 blocks of a
// rows x cols matrix (both multiples of 128): scales[(r / 128) * (cols /
// 128) + c / 128]. power_of_two: DeepSeek's ue8m0 scales.
inline constexpr int64_t kBlock = 128;
void quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales);
void quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales);
void dequantize_tiles(const uint8_t* q, int64_t rows, int64_t cols, const float* scales, float* y);
void dequantize_blocks(const uint8_t* q, int64_t rows, int64_t cols, const float* scales, float* y);

// Tiles of any shape over any rows x cols (the training GEMMs' operands,
// model/fp8_linear.hpp): {1, 128} along rows, {128, 1} down columns (the
// weight gradient's operands, tiled along the tokens it sums over), {128,
// 128} blocks. Edge tiles are partial: their scale from what they cover.
// Tiles are numbered row-major over the tile grid (scales[i * ceil(cols /
// tile.cols) + j]); with whole tiles the layouts above.
struct Tile {
  int64_t rows = 1, cols = kBlock;
};
inline constexpr Tile kRowTile{1, kBlock}, kColumnTile{kBlock, 1}, kSquareBlock{kBlock, kBlock};
inline int64_t tile_count(int64_t rows, int64_t cols, Tile t) {
  return (rows + t.rows - 1) / t.rows * ((cols + t.cols - 1) / t.cols);
}
// q and/or y (either may be null), and the scales (may be null)
void quantize_tiled(const float* x, int64_t rows, int64_t cols, Tile t, bool power_of_two, uint8_t* q, float* y,
                    float* scales);
// How many of n values have |x * scale| above the format's largest finite
// value (clamped to it by the saturating cast); NaN not counted.
int64_t count_saturated(Format f, const float* x, int64_t n, float scale);

// The FP8 GEMM emulated on the CPU (FP8 recipes' GEMMs on hardware without
// FP8 units): each operand quantised and dequantised into float32 (fake
// quantisation), then the float32 GEMM on those values, as torchao's
// Float8Linear does with `emulate`. Tensorwise and delayed scaling with
// `scale`; blockwise tiles along rows and 128 x 128 blocks.
void fake_quantize(Format f, const float* x, int64_t n, float scale, float* y);
void fake_quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y);
void fake_quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y);

// The linear layers' FP8 GEMMs under one scale per operand (tensorwise and
// delayed scaling): each operand its codes (row-major), format and scale
// (the value is decode(code) / scale); float32 accumulation and output.
//   linear_forward8  out[N, OC] = X W^T (+ bias)   X [N, C], W [OC, C]
//   linear_dgrad8    dX[N, C] = dY W (overwritten)  dY [N, OC]
//   linear_wgrad8    dW[OC, C] (+)= dY^T X
// On the CPU the operands are decoded into float32 and the float32 GEMM
// runs (the emulation: the values of fake_quantize, bit for bit); on CUDA
// cuBLASLt's FP8 GEMM (kernels/cuda/gemm_fp8_cuda.cu: sm_89 and later,
// dimensions multiples of 16; else the decoded operands' float32 GEMM).
struct Operand8 {
  const uint8_t* q = nullptr;
  Format format = Format::e4m3;
  float scale = 1.0f;
};
void linear_forward8(float* out, Operand8 x, Operand8 w, const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_dgrad8(float* dinp, Operand8 dout, Operand8 w, int64_t N, int64_t C, int64_t OC);
void linear_wgrad8(float* dweight, Operand8 dout, Operand8 x, int64_t N, int64_t C, int64_t OC, bool accumulate);
// The same GEMMs under blockwise scaling (DeepSeek-V3): e4m3 codes with a
// factor per tile (the value is decode(code) * factor), numbered row-major
// over the tile grid (quantize_tiled's layout and scales):
//   linear_forward8b  X in 1 x 128 tiles along C, W in 128 x 128 blocks
//   linear_dgrad8b    dY in 1 x 128 tiles along OC, W in 128 x 128 blocks
//   linear_wgrad8b    dY and X in 128 x 1 tiles along the N tokens
// CPU: the operands decoded (quantize_tiled's y, bit for bit) and the
// float32 GEMM; CUDA: cuBLASLt's block-scaled FP8 GEMM (VEC128_32F and
// BLK128x128_32F scale modes: Hopper, cuBLAS 12.9 and later, dimensions
// multiples of 16), else the decoded operands' float32 GEMM.
struct Tiled8 {
  const uint8_t* q = nullptr;
  const float* factors = nullptr;
};
void linear_forward8b(float* out, Tiled8 x, Tiled8 w, const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_dgrad8b(float* dinp, Tiled8 dout, Tiled8 w, int64_t N, int64_t C, int64_t OC);
void linear_wgrad8b(float* dweight, Tiled8 dout, Tiled8 x, int64_t N, int64_t C, int64_t OC, bool accumulate);
// y = decode(q) * its tile's factor: quantize_tiled's y from its q and scales
void dequantize_tiled(const uint8_t* q, int64_t rows, int64_t cols, Tile t, const float* factors, float* y);
// The experts' grouped forward (kernels/grouped_gemm.hpp's layout: G groups
// of rows, offsets[G + 1] in host memory, W the G matrices [OC, C]), each
// group's rows and matrix with their own scale (x_scales[G], w_scales[G],
// host memory). CPU: every group decoded, then the float32 grouped GEMM;
// CUDA: the FP8 GEMM group by group. The backward is linear_dgrad8 /
// linear_wgrad8 group by group.
void grouped_linear_forward8(float* y, const uint8_t* x, Format fx, const float* x_scales, const uint8_t* w, Format fw,
                             const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC);

}  // namespace trident::kernels::fp8
