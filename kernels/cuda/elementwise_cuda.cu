// Elementwise and gather/scatter kernels on CUDA: GELU, SwiGLU, residual and
// bias gradients, token and position embeddings, storage rounding, and the
// fixed-order reductions (sums, sums of squares, non-finite
// counts). Grid-stride loops throughout. The token-embedding gradient is a
// scatter-add with atomics (its order of additions is not fixed); every
// other kernel here is deterministic.
#ifndef TRIDENT_CUDA_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <algorithm>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr int kThreads = kGridStrideThreads;  // the reductions' blocks too
constexpr float kGeluScale = 0.7978845608028654f;

__global__ void gelu_fwd(float* out, const float* inp, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.f + tanhf(u));
  }
}

__global__ void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float grad = 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kGeluScale * (1.f + 3 * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

__global__ void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
    out[i] = g / (1.f + expf(-g)) * u;
  }
}

__global__ void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[i];
    const float sig = 1.f / (1.f + expf(-g));
    dinp[n * 2 * F + F + f] = d * g * sig;
    dinp[n * 2 * F + f] = d * u * sig * (1.f + g * (1.f - sig));
  }
}

__global__ void clamped_swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F, float a, float L) {
  GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float gc = fminf(inp[n * 2 * F + f], L), uc = fminf(fmaxf(inp[n * 2 * F + F + f], -L), L);
    out[i] = gc / (1.f + expf(-a * gc)) * (uc + 1.f);
  }
}

__global__ void clamped_swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F, float a,
                                   float L) {
  GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[i];
    const float gc = fminf(g, L), uc = fminf(fmaxf(u, -L), L);
    const float sig = 1.f / (1.f + expf(-a * gc));
    dinp[n * 2 * F + F + f] = u >= -L && u <= L ? d * gc * sig : 0.f;
    dinp[n * 2 * F + f] = g <= L ? d * (uc + 1.f) * sig * (1.f + a * gc * (1.f - sig)) : 0.f;
  }
}

__global__ void add_bias_rows(float* y, const float* b, int64_t n, int64_t OC) {
  GRID_STRIDE(i, n * OC) { y[i] += b[i % OC]; }
}

__global__ void residual_fwd(float* out, const float* a, const float* b, const float* bias, int64_t N, int64_t C) {
  GRID_STRIDE(i, N * C) out[i] = a[i] + b[i] + (bias ? bias[i % C] : 0.f);
}

// Column sums in row order, one thread per column (deterministic).
__global__ void column_sums(float* dst, const float* src, int64_t N, int64_t C, bool accumulate) {
  GRID_STRIDE(c, C) {
    float s = accumulate ? dst[c] : 0.f;
    for (int64_t n = 0; n < N; ++n) s += src[n * C + c];
    dst[c] = s;
  }
}

__global__ void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C,
                              int64_t vocab_begin, int64_t V) {
  GRID_STRIDE(idx, N * C) {
    const int64_t n = idx / C, c = idx % C, row = int64_t(tokens[n]) - vocab_begin;
    out[idx] = row >= 0 && row < V ? wte[row * C + c] : 0.f;
  }
}

__global__ void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C,
                              int64_t vocab_begin, int64_t V) {
  GRID_STRIDE(idx, N * C) {
    const int64_t n = idx / C, c = idx % C, row = int64_t(tokens[n]) - vocab_begin;
    if (row >= 0 && row < V) atomicAdd(dwte + row * C + c, dout[idx]);
  }
}

__global__ void position_fwd(float* out, const float* inp, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                             int64_t C, const int32_t* doc_start) {
  GRID_STRIDE(idx, rows * C) {
    const int64_t i = idx / C, c = idx % C, row = row_begin + i;
    const int64_t p = row % T - (doc_start ? doc_start[row] : 0);
    out[idx] = inp[idx] + (wpe ? wpe[p * C + c] : 0.f);
  }
}

// dwpe[p, c] += sum of dout rows i with (row_begin + i) % T == p, in row order.
__global__ void position_bwd(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T, int64_t C) {
  GRID_STRIDE(idx, T * C) {
    const int64_t p = idx / C, c = idx % C;
    int64_t i = ((p - row_begin) % T + T) % T;
    float s = 0;
    for (; i < rows; i += T) s += dout[i * C + c];
    dwpe[idx] += s;
  }
}

// Document masking: rows at document position p, in row order (each thread
// scans every row: rows x T x C work, deterministic, no atomics).
__global__ void position_bwd_docs(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T, int64_t C,
                                  const int32_t* doc_start) {
  GRID_STRIDE(idx, T * C) {
    const int64_t p = idx / C, c = idx % C;
    float s = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = row_begin + i;
      if (row % T - doc_start[row] == p) s += dout[i * C + c];
    }
    dwpe[idx] += s;
  }
}

__global__ void round_bf16(float* x, int64_t n) {
  GRID_STRIDE(i, n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}
__global__ void round_fp16(float* x, int64_t n) { GRID_STRIDE(i, n) x[i] = __half2float(__float2half_rn(x[i])); }

__global__ void pack_bf16(uint16_t* dst, const float* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}
__global__ void pack_fp16(uint16_t* dst, const float* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}
__global__ void unpack_bf16(float* dst, const uint16_t* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}
__global__ void unpack_fp16(float* dst, const uint16_t* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = __half2float(__ushort_as_half(src[i]));
}

__global__ void nonfinite_count(const float* x, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  GRID_STRIDE(i, n) c += isfinite(x[i]) ? 0ull : 1ull;
  c = block_sum(c);
  if (threadIdx.x == 0 && c) atomicAdd(count, c);
}

// One block per chunk [begin, end) of `chunks`; partial[b] = sum of x (or x^2).
__global__ void chunk_sums(double* partial, const float* x, const int64_t* chunks, bool squares) {
  const int64_t begin = chunks[2 * blockIdx.x], end = chunks[2 * blockIdx.x + 1];
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    s += squares ? v * v : v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

double chunked_sum(const float* x, const std::vector<std::pair<int64_t, int64_t>>& ranges, bool squares) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> chunks;
  for (auto [b, e] : ranges)
    for (int64_t s = b; s < e; s += kChunk) chunks.push_back(s), chunks.push_back(std::min(e, s + kChunk));
  const int64_t nchunks = int64_t(chunks.size() / 2);
  if (nchunks == 0) return 0;
  auto* dchunks = static_cast<int64_t*>(scratch_alloc(chunks.size() * sizeof(int64_t)));
  auto* dpartial = static_cast<double*>(scratch_alloc(size_t(nchunks) * sizeof(double)));
  CUDA_CHECK(
      cudaMemcpyAsync(dchunks, chunks.data(), chunks.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream()));
  KERNEL_LAUNCH(chunk_sums, unsigned(nchunks), kThreads, 0)(dpartial, x, dchunks, squares);
  CUDA_LAUNCHED("chunk_sums");
  std::vector<double> partial(static_cast<size_t>(nchunks));
  CUDA_CHECK(
      cudaMemcpyAsync(partial.data(), dpartial, partial.size() * sizeof(double), cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  scratch_free(dchunks, chunks.size() * sizeof(int64_t));
  scratch_free(dpartial, size_t(nchunks) * sizeof(double));
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) { LAUNCH_GRID_STRIDE(gelu_fwd, n, out, inp, n); }
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  LAUNCH_GRID_STRIDE(gelu_bwd, n, dinp, inp, dout, n);
}
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
  LAUNCH_GRID_STRIDE(swiglu_fwd, N * F, out, inp, N, F);
}
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  LAUNCH_GRID_STRIDE(swiglu_bwd, N * F, dinp, inp, dout, N, F);
}
void clamped_swiglu_forward(float* out, const float* inp, int64_t N, int64_t F, double alpha, double limit) {
  LAUNCH_GRID_STRIDE(clamped_swiglu_fwd, N * F, out, inp, N, F, float(alpha), float(limit));
}
void clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F, double alpha,
                             double limit) {
  LAUNCH_GRID_STRIDE(clamped_swiglu_bwd, N * F, dinp, inp, dout, N, F, float(alpha), float(limit));
}
void residual_forward(float* out, const float* a, const float* b, const float* bias, int64_t N, int64_t C) {
  LAUNCH_GRID_STRIDE(residual_fwd, N * C, out, a, b, bias, N, C);
}
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C, bool accumulate) {
  if (dbias) LAUNCH_GRID_STRIDE(column_sums, C, dbias, dout, N, C, accumulate);
}
// kernels/grouped_gemm.hpp's biases: a launch per group (host offsets)
void grouped_bias_forward(float* y, const float* b, const int64_t* offsets, int64_t G, int64_t OC) {
  for (int64_t g = 0; g < G; ++g)
    LAUNCH_GRID_STRIDE(add_bias_rows, (offsets[g + 1] - offsets[g]) * OC, y + offsets[g] * OC, b + g * OC,
                       offsets[g + 1] - offsets[g], OC);
}
void grouped_bias_backward(float* db, const float* dy, const int64_t* offsets, int64_t G, int64_t OC, bool accumulate) {
  for (int64_t g = 0; g < G; ++g)
    bias_backward(db + g * OC, dy + offsets[g] * OC, offsets[g + 1] - offsets[g], OC, accumulate);
}
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V) {
  LAUNCH_GRID_STRIDE(embedding_fwd, N * C, out, tokens, wte, N, C, vocab_begin, V);
}
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C,
                        int64_t vocab_begin, int64_t V) {
  LAUNCH_GRID_STRIDE(embedding_bwd, N * C, dwte, dout, tokens, N, C, vocab_begin, V);
}
void position_forward(float* out, const float* inp, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                      int64_t C, const int32_t* doc_start) {
  LAUNCH_GRID_STRIDE(position_fwd, rows * C, out, inp, wpe, row_begin, rows, T, C, doc_start);
}
void position_backward(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T, int64_t C,
                       const int32_t* doc_start) {
  if (doc_start)
    LAUNCH_GRID_STRIDE(position_bwd_docs, T * C, dwpe, dout, row_begin, rows, T, C, doc_start);
  else
    LAUNCH_GRID_STRIDE(position_bwd, T * C, dwpe, dout, row_begin, rows, T, C);
}
void round_to_storage(float* x, int64_t n, int mode) {
  if (mode == 1) LAUNCH_GRID_STRIDE(round_bf16, n, x, n);
  if (mode == 2) LAUNCH_GRID_STRIDE(round_fp16, n, x, n);
}
void pack_16(uint16_t* dst, const float* src, int64_t n, int mode) {
  if (mode == 1)
    LAUNCH_GRID_STRIDE(pack_bf16, n, dst, src, n);
  else
    LAUNCH_GRID_STRIDE(pack_fp16, n, dst, src, n);
}
void unpack_16(float* dst, const uint16_t* src, int64_t n, int mode) {
  if (mode == 1)
    LAUNCH_GRID_STRIDE(unpack_bf16, n, dst, src, n);
  else
    LAUNCH_GRID_STRIDE(unpack_fp16, n, dst, src, n);
}
int64_t count_nonfinite(const float* x, int64_t n) {
  if (n == 0) return 0;
  auto* d = static_cast<unsigned long long*>(scratch_alloc(sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(unsigned long long), stream()));
  LAUNCH_GRID_STRIDE(nonfinite_count, n, x, n, d);
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  scratch_free(d, sizeof(unsigned long long));
  return int64_t(h);
}
void fill_zero(float* x, int64_t n) {
  if (n > 0) CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(n) * sizeof(float), stream()));
}
double sum(const float* x, int64_t n) { return chunked_sum(x, {{0, n}}, false); }
double sum_of_squares_ranges(const float* g, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  return chunked_sum(g, ranges, true);
}

}  // namespace trident::kernels::cuda
