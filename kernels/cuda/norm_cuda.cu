// LayerNorm / RMSNorm on CUDA: one block per row for the row-wise parts
// (two-pass mean and variance), and a column kernel for the weight and bias
// gradients that sums the rows in a fixed order (deterministic).
#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;

__global__ void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                              int64_t C, float eps) {
  const int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  float s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s) / float(C);
  float v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - m) * (x[c] - m);
  const float r = 1.f / sqrtf(block_sum(v) / float(C) + eps);
  float* o = out + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) mean[n] = m, rstd[n] = r;
}

__global__ void layernorm_bwd_rows(float* dinp, const float* dout, const float* inp, const float* w, const float* mean,
                                   const float* rstd, int64_t C) {
  const int64_t n = blockIdx.x;
  const float *x = inp + n * C, *g = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, b = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float dn = w[c] * g[c];
    a += dn;
    b += dn * (x[c] - m) * r;
  }
  const float dmean = block_sum(a) / float(C), dnorm_mean = block_sum(b) / float(C);
  float* dx = dinp + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (x[c] - m) * r;
    dx[c] += (w[c] * g[c] - dmean - xhat * dnorm_mean) * r;
  }
}

__global__ void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t C, float eps) {
  const int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  const float r = 1.f / sqrtf(block_sum(ss) / float(C) + eps);
  float* o = out + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * r * w[c];
  if (threadIdx.x == 0) rstd[n] = r;
}

__global__ void rmsnorm_bwd_rows(float* dinp, const float* dout, const float* inp, const float* w, const float* rstd,
                                 int64_t C) {
  const int64_t n = blockIdx.x;
  const float *x = inp + n * C, *g = dout + n * C;
  const float r = rstd[n];
  float d = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) d += w[c] * g[c] * x[c];
  const float dot = block_sum(d) * r * r * r / float(C);
  float* dx = dinp + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dx[c] += w[c] * g[c] * r - x[c] * dot;
}

// Column sums over N rows: dw[c] (+)= sum_n g * xhat, db[c] (+)= sum_n g.
// Block (32, 8): 32 columns, 8 row lanes; lanes reduced in a fixed order.
// mean null: RMSNorm (xhat = x * rstd, no db).
__global__ void norm_weight_grads(float* dw, float* db, const float* dout, const float* inp, const float* mean,
                                  const float* rstd, int64_t N, int64_t C, bool accumulate) {
  __shared__ float sw[8][33], sb[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float aw = 0, ab = 0;
  if (c < C)
    for (int64_t n = threadIdx.y; n < N; n += 8) {
      const float g = dout[n * C + c];
      const float xhat = mean ? (inp[n * C + c] - mean[n]) * rstd[n] : inp[n * C + c] * rstd[n];
      aw += g * xhat;
      ab += g;
    }
  sw[threadIdx.y][threadIdx.x] = aw, sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0, tb = 0;
    for (int i = 0; i < 8; ++i) tw += sw[i][threadIdx.x], tb += sb[i][threadIdx.x];
    dw[c] = accumulate ? dw[c] + tw : tw;
    if (db) db[c] = accumulate ? db[c] + tb : tb;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, double eps) {
  if (N == 0) return;
  KERNEL_LAUNCH(layernorm_fwd, unsigned(N), kRowThreads, 0)(out, mean, rstd, inp, weight, bias, C, float(eps));
  CUDA_LAUNCHED("layernorm_fwd");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate) {
  if (N > 0) {
    KERNEL_LAUNCH(layernorm_bwd_rows, unsigned(N), kRowThreads, 0)(dinp, dout, inp, weight, mean, rstd, C);
    CUDA_LAUNCHED("layernorm_bwd_rows");
  }
  KERNEL_LAUNCH(norm_weight_grads, unsigned((C + 31) / 32), (dim3(32, 8)), 0)
  (dweight, dbias, dout, inp, mean, rstd, N, C, accumulate);
  CUDA_LAUNCHED("norm_weight_grads");
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, double eps) {
  if (N == 0) return;
  KERNEL_LAUNCH(rmsnorm_fwd, unsigned(N), kRowThreads, 0)(out, rstd, inp, weight, C, float(eps));
  CUDA_LAUNCHED("rmsnorm_fwd");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate) {
  if (N > 0) {
    KERNEL_LAUNCH(rmsnorm_bwd_rows, unsigned(N), kRowThreads, 0)(dinp, dout, inp, weight, rstd, C);
    CUDA_LAUNCHED("rmsnorm_bwd_rows");
  }
  KERNEL_LAUNCH(norm_weight_grads, unsigned((C + 31) / 32), (dim3(32, 8)), 0)
  (dweight, nullptr, dout, inp, nullptr, rstd, N, C, accumulate);
  CUDA_LAUNCHED("norm_weight_grads");
}

}  // namespace trident::kernels::cuda
