// FP8 on CUDA (kernels/fp8.hpp): the casts of kernels/fp8_code.hpp (the CPU
// code's bits, no hardware conversion instruction: its e4m3 NaN and
// saturation rules differ by instruction and flag), tensorwise quantisation
// with a given scale (amax and scale come to the host: the scale is a
// collective's result), and blockwise tiles: one block of 128 threads per
// 1 x 128 tile (or per 128 x 128 block, looping over its rows), its amax a
// shared-memory tree that keeps NaN, s = amax / 448 (the power of two at or
// above it, from its bits, for ue8m0).
#include "kernels/cuda/common.cuh"
#include "kernels/fp8_code.hpp"

namespace trident::kernels::cuda {

namespace {

namespace code = ::trident::kernels::fp8_code;

// max |.| keeping NaN (fmaxf drops it)
__device__ inline float nan_max(float a, float b) { return a != a ? a : b != b ? b : (a > b ? a : b); }

__global__ void fp8_amax_kernel(float* partial, const float* x, int64_t n) {
  __shared__ float m[256];
  float a = 0.f;
  GRID_STRIDE(i, n) a = nan_max(a, fabsf(x[i]));
  m[threadIdx.x] = a;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) m[threadIdx.x] = nan_max(m[threadIdx.x], m[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = m[0];
}

__global__ void fp8_quantize_kernel(uint8_t* q, const float* x, int64_t n, float scale, int format) {
  GRID_STRIDE(i, n) q[i] = code::encode_saturated(format, x[i] * scale);
}

__global__ void fp8_fake_quantize_kernel(float* y, const float* x, int64_t n, float scale, int format) {
  GRID_STRIDE(i, n) y[i] = code::decode(format, code::encode_saturated(format, x[i] * scale)) / scale;
}

// One block (128 threads) per tile of `rows_per` rows x 128 columns: tile t
// of row block r covers rows [r rows_per, (r + 1) rows_per), columns
// [128 t, 128 t + 128). q: the codes (null: only y); y: the dequantised
// values (null: only q).
__global__ void fp8_tiles_kernel(uint8_t* q, float* y, float* scales, const float* x, int64_t cols, int64_t rows_per,
                                 bool pow2) {
  __shared__ float m[128];
  const int64_t tiles = cols / 128, r0 = int64_t(blockIdx.x) / tiles * rows_per, c = int64_t(blockIdx.x) % tiles * 128;
  float a = 0.f;
  for (int64_t r = r0; r < r0 + rows_per; ++r) a = nan_max(a, fabsf(x[r * cols + c + threadIdx.x]));
  m[threadIdx.x] = a;
  __syncthreads();
  for (unsigned s = 64; s > 0; s /= 2) {
    if (threadIdx.x < s) m[threadIdx.x] = nan_max(m[threadIdx.x], m[threadIdx.x + s]);
    __syncthreads();
  }
  float s = m[0] / 448.0f;
  if (pow2 && s > 0.f && s < 3.4e38f) s = code::pow2_at_or_above(s);
  if (threadIdx.x == 0 && scales) scales[blockIdx.x] = s;
  for (int64_t r = r0; r < r0 + rows_per; ++r) {
    const int64_t i = r * cols + c + threadIdx.x;
    const uint8_t b = s == 0.f ? uint8_t(0) : code::encode_saturated(0, x[i] / s);
    if (q) q[i] = b;
    if (y) y[i] = code::decode(0, b) * s;
  }
}

void launch_tiles(uint8_t* q, float* y, float* scales, const float* x, int64_t rows, int64_t cols, bool square,
                  bool pow2) {
  const int64_t rows_per = square ? 128 : 1, blocks = rows / rows_per * (cols / 128);
  if (blocks == 0) return;
  KERNEL_LAUNCH(fp8_tiles_kernel, unsigned(blocks), 128, 0)(q, y, scales, x, cols, rows_per, pow2);
  CUDA_LAUNCHED("fp8_tiles_kernel");
}

}  // namespace

float fp8_amax(const float* x, int64_t n) {
  if (n == 0) return 0.f;
  constexpr int threads = 256;
  const unsigned blocks = grid_for(n, threads) < 1024 ? grid_for(n, threads) : 1024;
  float* partial = static_cast<float*>(scratch_alloc(blocks * sizeof(float)));
  KERNEL_LAUNCH(fp8_amax_kernel, blocks, threads, 0)(partial, x, n);
  CUDA_LAUNCHED("fp8_amax_kernel");
  float* one = static_cast<float*>(scratch_alloc(sizeof(float)));
  KERNEL_LAUNCH(fp8_amax_kernel, 1, threads, 0)(one, partial, int64_t(blocks));
  CUDA_LAUNCHED("fp8_amax_kernel");
  float out = 0.f;
#ifdef TRIDENT_CUDA_EMULATION
  out = *one;
#else
  CUDA_CHECK(cudaMemcpyAsync(&out, one, sizeof(float), cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
#endif
  scratch_free(one, sizeof(float));
  scratch_free(partial, blocks * sizeof(float));
  return out;
}

void fp8_quantize(uint8_t* q, const float* x, int64_t n, float scale, int format) {
  LAUNCH_GRID_STRIDE(fp8_quantize_kernel, n, q, x, n, scale, format);
}

void fp8_fake_quantize(float* y, const float* x, int64_t n, float scale, int format) {
  LAUNCH_GRID_STRIDE(fp8_fake_quantize_kernel, n, y, x, n, scale, format);
}

void fp8_quantize_tiles(uint8_t* q, float* scales, const float* x, int64_t rows, int64_t cols, bool square, bool pow2) {
  launch_tiles(q, nullptr, scales, x, rows, cols, square, pow2);
}

void fp8_fake_quantize_tiles(float* y, const float* x, int64_t rows, int64_t cols, bool square, bool pow2) {
  launch_tiles(nullptr, y, nullptr, x, rows, cols, square, pow2);
}

}  // namespace trident::kernels::cuda
