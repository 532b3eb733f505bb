// Softmax cross-entropy on CUDA, fused and vocab-parallel (the three passes
// of kernels/cross_entropy.hpp): one block per token row.
#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float row_max_of(const float* row, int64_t Vvalid) {
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < Vvalid; v += blockDim.x) mx = fmaxf(mx, row[v]);
  return block_max(mx);
}

__device__ float row_sum_exp(const float* row, int64_t Vvalid, float mx) {
  float s = 0;
  for (int64_t v = threadIdx.x; v < Vvalid; v += blockDim.x) s += expf(row[v] - mx);
  return block_sum(s);
}

// row[v] = dscale * (softmax - onehot) over the valid columns, 0 in the padding
__device__ void write_dlogits(float* row, int64_t V, int64_t Vvalid, float lse, int64_t tgt, float dscale) {
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    row[v] = v < Vvalid ? expf(row[v] - lse) * dscale - (v == tgt ? dscale : 0.f) : 0.f;
}

__global__ void ce_fused(float* losses, float* logits, const int32_t* targets, int64_t V, int64_t Vvalid,
                         bool write_grad, float dscale) {
  const int64_t n = blockIdx.x;
  float* row = logits + n * V;
  const float mx = row_max_of(row, Vvalid);
  const float lse = mx + logf(row_sum_exp(row, Vvalid, mx));
  const int64_t tgt = targets[n];
  const float target_logit = tgt >= 0 ? row[tgt] : 0.f;
  __syncthreads();  // every thread has read row[tgt] before it is overwritten
  if (threadIdx.x == 0) losses[n] = tgt >= 0 ? lse - target_logit : 0.f;
  if (write_grad) write_dlogits(row, V, Vvalid, lse, tgt, tgt >= 0 ? dscale : 0.f);
}

__global__ void ce_max(float* row_max, const float* logits, int64_t V, int64_t Vvalid) {
  const int64_t n = blockIdx.x;
  const float mx = row_max_of(logits + n * V, Vvalid);
  if (threadIdx.x == 0) row_max[n] = mx;
}

__global__ void ce_sums(float* sums, const float* logits, const float* row_max, const int32_t* targets, int64_t N,
                        int64_t V, int64_t Vvalid, int64_t vocab_begin) {
  const int64_t n = blockIdx.x;
  const float* row = logits + n * V;
  const float s = row_sum_exp(row, Vvalid, row_max[n]);
  if (threadIdx.x == 0) {
    const int64_t tgt = int64_t(targets[n]) - vocab_begin;
    sums[n] = s;
    sums[N + n] = targets[n] >= 0 && tgt >= 0 && tgt < Vvalid ? row[tgt] : 0.f;
  }
}

__global__ void ce_finish(float* losses, float* logits, const float* row_max, const float* sums, const int32_t* targets,
                          int64_t N, int64_t V, int64_t Vvalid, int64_t vocab_begin, bool write_grad, float dscale) {
  const int64_t n = blockIdx.x;
  const float lse = row_max[n] + logf(sums[n]);
  const bool ignored = targets[n] < 0;
  if (threadIdx.x == 0) losses[n] = ignored ? 0.f : lse - sums[N + n];
  if (!write_grad) return;
  const int64_t tgt = int64_t(targets[n]) - vocab_begin;
  write_dlogits(logits + n * V, V, Vvalid, lse, tgt >= 0 && tgt < Vvalid ? tgt : -1, ignored ? 0.f : dscale);
}

}  // namespace

void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           bool write_grad, float dscale) {
  if (N == 0) return;
  KERNEL_LAUNCH(ce_fused, unsigned(N), kThreads, 0)(losses, logits, targets, V, Vvalid, write_grad, dscale);
  CUDA_LAUNCHED("ce_fused");
}

void cross_entropy_local_max(float* row_max, const float* logits, int64_t N, int64_t V, int64_t Vvalid) {
  if (N == 0) return;
  KERNEL_LAUNCH(ce_max, unsigned(N), kThreads, 0)(row_max, logits, V, Vvalid);
  CUDA_LAUNCHED("ce_max");
}

void cross_entropy_local_sums(float* sums, const float* logits, const float* row_max, const int32_t* targets, int64_t N,
                              int64_t V, int64_t Vvalid, int64_t vocab_begin) {
  if (N == 0) return;
  KERNEL_LAUNCH(ce_sums, unsigned(N), kThreads, 0)(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin);
  CUDA_LAUNCHED("ce_sums");
}

void cross_entropy_finish(float* losses, float* logits, const float* row_max, const float* sums, const int32_t* targets,
                          int64_t N, int64_t V, int64_t Vvalid, int64_t vocab_begin, bool write_grad, float dscale) {
  if (N == 0) return;
  KERNEL_LAUNCH(ce_finish, unsigned(N), kThreads, 0)
  (losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, write_grad, dscale);
  CUDA_LAUNCHED("ce_finish");
}

}  // namespace trident::kernels::cuda
