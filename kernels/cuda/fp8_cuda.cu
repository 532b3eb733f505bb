// FP8 on CUDA (kernels/fp8.hpp): the casts of kernels/fp8_code.hpp (the CPU
// code's bits, no hardware conversion instruction: its e4m3 NaN and
// saturation rules differ by instruction and flag), tensorwise quantisation
// with a given scale (amax and scale come to the host: the scale is a
// collective's result), and blockwise tiles: one block of 128 threads per
// tile of any shape (1 x 128, 128 x 1, 128 x 128; partial at the edges), its amax a
// shared-memory tree that keeps NaN, s = amax / 448 (the power of two at or
// above it, from its bits, for ue8m0).
#include <cstring>

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

__global__ void fp8_dequantize_kernel(float* y, const uint8_t* q, int64_t n, float scale, int format) {
  GRID_STRIDE(i, n) y[i] = code::decode(format, q[i]) / scale;
}

__global__ void fp8_fake_quantize_kernel(float* y, const float* x, int64_t n, float scale, int format) {
  GRID_STRIDE(i, n) y[i] = code::decode(format, code::encode_saturated(format, x[i] * scale)) / scale;
}

// One block (128 threads) per tile of tr x tc values (edge tiles partial):
// tile i of the row-major tile grid covers rows [r0, r0 + tr), columns
// [c0, c0 + tc) clipped to the matrix. q: the codes (null: only y); y: the
// dequantised values (null: only q); scales (null: not kept).
__global__ void fp8_tiles_kernel(uint8_t* q, float* y, float* scales, const float* x, int64_t rows, int64_t cols,
                                 int64_t tr, int64_t tc, bool pow2) {
  __shared__ float m[128];
  const int64_t grid_cols = (cols + tc - 1) / tc;
  const int64_t r0 = int64_t(blockIdx.x) / grid_cols * tr, c0 = int64_t(blockIdx.x) % grid_cols * tc;
  const int64_t h = (rows - r0 < tr ? rows - r0 : tr), w = (cols - c0 < tc ? cols - c0 : tc);
  float a = 0.f;
  for (int64_t k = threadIdx.x; k < h * w; k += blockDim.x) a = nan_max(a, fabsf(x[(r0 + k / w) * cols + c0 + k % w]));
  m[threadIdx.x] = a;
  __syncthreads();
  for (unsigned s = 64; s > 0; s /= 2) {
    if (threadIdx.x < s) m[threadIdx.x] = nan_max(m[threadIdx.x], m[threadIdx.x + s]);
    __syncthreads();
  }
  float s = m[0] / 448.0f;
  if (pow2 && s > 0.f && s < 3.4e38f) s = code::pow2_at_or_above(s);
  if (threadIdx.x == 0 && scales) scales[blockIdx.x] = s;
  for (int64_t k = threadIdx.x; k < h * w; k += blockDim.x) {
    const int64_t i = (r0 + k / w) * cols + c0 + k % w;
    const uint8_t b = s == 0.f ? uint8_t(0) : code::encode_saturated(0, x[i] / s);
    if (q) q[i] = b;
    if (y) y[i] = code::decode(0, b) * s;
  }
}

__global__ void fp8_saturated_kernel(unsigned long long* count, const float* x, int64_t n, float scale, float max) {
  unsigned long long k = 0;
  GRID_STRIDE(i, n) k += fabsf(x[i] * scale) > max;
  if (k) atomicAdd(count, k);
}

__global__ void fp8_dequantize_tiled_kernel(float* y, const uint8_t* q, const float* f, int64_t rows, int64_t cols,
                                            int64_t tr, int64_t tc) {
  const int64_t grid_cols = (cols + tc - 1) / tc;
  GRID_STRIDE(i, rows * cols) y[i] = code::decode(0, q[i]) * f[(i / cols / tr) * grid_cols + i % cols / tc];
}

// A scratch result back to the host (the wrappers return scalars: they wait for it).
void read_back(void* host, const void* device, size_t bytes) {
#ifdef TRIDENT_CUDA_EMULATION
  std::memcpy(host, device, bytes);
#else
  CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
#endif
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
  read_back(&out, one, sizeof(out));
  scratch_free(one, sizeof(float));
  scratch_free(partial, blocks * sizeof(float));
  return out;
}

void fp8_quantize(uint8_t* q, const float* x, int64_t n, float scale, int format) {
  LAUNCH_GRID_STRIDE(fp8_quantize_kernel, n, q, x, n, scale, format);
}

void fp8_dequantize(float* y, const uint8_t* q, int64_t n, float scale, int format) {
  LAUNCH_GRID_STRIDE(fp8_dequantize_kernel, n, y, q, n, scale, format);
}

void fp8_fake_quantize(float* y, const float* x, int64_t n, float scale, int format) {
  LAUNCH_GRID_STRIDE(fp8_fake_quantize_kernel, n, y, x, n, scale, format);
}

void fp8_quantize_tiled(uint8_t* q, float* y, float* scales, const float* x, int64_t rows, int64_t cols, int64_t tr,
                        int64_t tc, bool pow2) {
  const int64_t blocks = (rows + tr - 1) / tr * ((cols + tc - 1) / tc);
  if (rows == 0 || cols == 0) return;
  KERNEL_LAUNCH(fp8_tiles_kernel, unsigned(blocks), 128, 0)(q, y, scales, x, rows, cols, tr, tc, pow2);
  CUDA_LAUNCHED("fp8_tiles_kernel");
}

void fp8_dequantize_tiled(float* y, const uint8_t* q, const float* factors, int64_t rows, int64_t cols, int64_t tr,
                          int64_t tc) {
  LAUNCH_GRID_STRIDE(fp8_dequantize_tiled_kernel, rows * cols, y, q, factors, rows, cols, tr, tc);
}

int64_t fp8_count_saturated(const float* x, int64_t n, float scale, int format) {
  if (n == 0) return 0;
  auto* count = static_cast<unsigned long long*>(scratch_alloc(sizeof(unsigned long long)));
  unsigned long long out = 0;
#ifdef TRIDENT_CUDA_EMULATION
  *count = 0;
#else
  CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(out), stream()));
#endif
  LAUNCH_GRID_STRIDE(fp8_saturated_kernel, n, count, x, n, scale, format == 0 ? 448.0f : 57344.0f);
  read_back(&out, count, sizeof(out));
  scratch_free(count, sizeof(out));
  return int64_t(out);
}

}  // namespace trident::kernels::cuda
