// Multi-tensor AdamW on CUDA: every range of the flat shard (each with its
// weight decay) in one launch, a block per 64K-element chunk, the update of
// kernels/adamw.hpp in fp32 with the bias corrections computed on the host
// in double, as the CPU kernel does; and the MoE correction bias's sign step.
#include <vector>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

struct Chunk {
  int64_t begin, end;
  float weight_decay;
};

__global__ void adamw_chunks(float* param, float* m, float* v, const float* grad, const Chunk* chunks, float lr,
                             float b1, float b2, float eps, float c1, float c2, float gs) {
  const Chunk ch = chunks[blockIdx.x];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.f - b1) * g;
    const float vi = b2 * v[i] + (1.f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + ch.weight_decay * param[i]);
  }
}

// The correction bias's step (kernels/adamw.hpp bias_sign_update), compared in
// double as on the CPU, so both give the same bits.
__global__ void bias_sign_kernel(float* param, const float* count, int64_t n, double rate, double mean) {
  GRID_STRIDE(i, n) {
    const double gap = mean - double(count[i]);
    param[i] += float(rate * double((gap > 0) - (gap < 0)));
  }
}

}  // namespace

void bias_sign_update(float* param, const float* count, int64_t n, double rate, double mean) {
  LAUNCH_GRID_STRIDE(bias_sign_kernel, n, param, count, n, rate, mean);
}

void adamw_update_multi(float* param, float* m, float* v, const float* grad,
                        const std::vector<AdamWRangeDevice>& ranges, double lr, double beta1, double beta2, double eps,
                        int64_t step, double grad_scale) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<Chunk> chunks;
  for (const auto& r : ranges)
    for (int64_t s = r.offset; s < r.offset + r.size; s += kChunk)
      chunks.push_back({s, std::min(r.offset + r.size, s + kChunk), r.weight_decay});
  if (chunks.empty()) return;
  const size_t bytes = chunks.size() * sizeof(Chunk);
  auto* d = static_cast<Chunk*>(scratch_alloc(bytes));
  CUDA_CHECK(cudaMemcpyAsync(d, chunks.data(), bytes, cudaMemcpyHostToDevice, stream()));
  const float c1 = float(1.0 / (1.0 - std::pow(beta1, double(step))));
  const float c2 = float(1.0 / (1.0 - std::pow(beta2, double(step))));
  KERNEL_LAUNCH(adamw_chunks, unsigned(chunks.size()), 256, 0)
  (param, m, v, grad, d, float(lr), float(beta1), float(beta2), float(eps), c1, c2, float(grad_scale));
  CUDA_LAUNCHED("adamw_chunks");
  // (a copy from pageable memory has read the host table when it returns;
  // the block is reused in stream order)
  scratch_free(d, bytes);
}

}  // namespace trident::kernels::cuda
