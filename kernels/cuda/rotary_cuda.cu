// Rotary position embedding on CUDA (see kernels/rotary.hpp): the q and k
// heads rotated in place by the (cos, sin) table, forward and inverse; the
// table's device copy is cached per host table. Deterministic.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/common.cuh"

namespace trident::kernels::cuda {

namespace {

// table[T, D/2, 2] (cos, sin) in double; heads [0, H + KV) rotated by sign * angle.
__global__ void rope_apply(float* qkv, const double* table, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                           double sign, const int32_t* doc_start) {
  const int64_t half = D / 2, W = (H + 2 * KV) * D;
  GRID_STRIDE(idx, B * T * (H + KV) * half) {
    const int64_t i = idx % half, h = idx / half % (H + KV), bt = idx / half / (H + KV);
    const int64_t t = bt % T - (doc_start ? doc_start[bt] : 0);
    const float c = float(table[(t * half + i) * 2]), s = float(sign * table[(t * half + i) * 2 + 1]);
    float* x = qkv + bt * W + h * D;
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

// interleaved pairs (2i, 2i + 1) of `heads` vectors per row (kernels::rope_pairs_forward)
__global__ void rope_pairs_apply(float* x, const double* table, int64_t B, int64_t T, int64_t heads, int64_t ld,
                                 int64_t stride, int64_t offset, int64_t Dr, double sign, const int32_t* doc_start) {
  const int64_t half = Dr / 2;
  GRID_STRIDE(idx, B * T * heads * half) {
    const int64_t i = idx % half, h = idx / half % heads, bt = idx / half / heads;
    const int64_t t = bt % T - (doc_start ? doc_start[bt] : 0);
    const float c = float(table[(t * half + i) * 2]), s = float(sign * table[(t * half + i) * 2 + 1]);
    float* v = x + bt * ld + h * stride + offset;
    const float x1 = v[2 * i], x2 = v[2 * i + 1];
    v[2 * i] = x1 * c - x2 * s;
    v[2 * i + 1] = x2 * c + x1 * s;
  }
}

// Device copies of rope tables (kernels::rope_table, T rows of D values), kept
// for the process's life: one per host table, found by address and size and
// checked against its row for position 1, which fixes theta and D, so a table
// freed and another allocated at the same address is never served stale. The
// map is never destroyed: device memory a cache holds until exit is not a leak.
const double* device_table(const double* host, int64_t T, int64_t D) {
  struct Entry {
    double* device = nullptr;
    std::vector<double> row1;
  };
  static std::mutex mutex;
  static auto* tables = new std::map<std::pair<const double*, int64_t>, Entry>;
  const int64_t n = T * D;
  std::vector<double> row1(host + std::min(D, n), host + std::min(2 * D, n));
  std::lock_guard<std::mutex> lock(mutex);
  Entry& e = (*tables)[{host, n}];
  if (!e.device || e.row1 != row1) {
    if (!e.device) CUDA_CHECK(cudaMalloc(&e.device, size_t(n) * sizeof(double)));
    CUDA_CHECK(cudaMemcpy(e.device, host, size_t(n) * sizeof(double), cudaMemcpyHostToDevice));
    e.row1 = std::move(row1);
  }
  return e.device;
}

}  // namespace

void rope_forward(float* qkv, const double* table, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start) {
  LAUNCH_GRID_STRIDE(rope_apply, B * T * (H + KV) * (D / 2), qkv, device_table(table, T, D), B, T, H, KV, D, 1.0,
                     doc_start);
}
void rope_backward(float* dqkv, const double* table, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  LAUNCH_GRID_STRIDE(rope_apply, B * T * (H + KV) * (D / 2), dqkv, device_table(table, T, D), B, T, H, KV, D, -1.0,
                     doc_start);
}

void rope_pairs(float* x, const double* table, int64_t B, int64_t T, int64_t heads, int64_t ld, int64_t stride,
                int64_t offset, int64_t Dr, double sign, const int32_t* doc_start) {
  LAUNCH_GRID_STRIDE(rope_pairs_apply, B * T * heads * (Dr / 2), x, device_table(table, T, Dr), B, T, heads, ld, stride,
                     offset, Dr, sign, doc_start);
}

}  // namespace trident::kernels::cuda
