// GEMM and the linear layer through cuBLASLt (column-major underneath; the
// row-major calls swap operands: C^T = B^T A^T). Descriptors and the
// heuristic's algorithm are cached per shape; one 32 MiB workspace. The bias
// of linear_forward is the BIAS epilogue; where cuBLASLt offers no algorithm
// with it, a separate bias kernel runs after the plain GEMM.
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/cublaslt.cuh"

namespace trident::kernels::cuda {

namespace {

constexpr size_t kWorkspace = kLtWorkspace;

// The pointers' alignment is part of a plan: cuBLASLt's heuristic assumes
// 256-byte operands unless told otherwise, and parameters are views at any
// float offset of the flat buffer.
uint32_t alignment(const void* p) {
  if (!p) return 256;
  const auto u = reinterpret_cast<uintptr_t>(p);
  const uintptr_t a = u & (~u + 1);  // the largest power of two dividing the address
  return uint32_t(a >= 256 ? 256 : a);
}

struct Key {
  bool ta, tb, bias;
  int64_t m, n, k, lda, ldb, ldc;
  int mode;
  uint32_t align_a, align_b, align_c, align_bias;
  bool operator<(const Key& o) const {
    return std::tie(ta, tb, bias, m, n, k, lda, ldb, ldc, mode, align_a, align_b, align_c, align_bias) <
           std::tie(o.ta, o.tb, o.bias, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.mode, o.align_a, o.align_b, o.align_c,
                    o.align_bias);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;          // an algorithm was found
  bool fused_bias = false;  // with the BIAS epilogue
};

struct State {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<Key, Plan> plans;
};

State& state() {
  static State s;
  if (!s.handle) s.handle = lt_context().handle, s.workspace = lt_context().workspace;
  return s;
}

cublasComputeType_t compute_type(int mode) {
  return mode == 1 ? CUBLAS_COMPUTE_32F_FAST_16BF : mode == 2 ? CUBLAS_COMPUTE_32F_FAST_16F : CUBLAS_COMPUTE_32F;
}

Plan make_plan(State& s, const Key& key) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute_type(key.mode), CUDA_R_32F));
  cublasOperation_t ta = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (key.bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    cudaDataType_t bt = CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, uint64_t(key.ta ? key.k : key.m),
                                          uint64_t(key.ta ? key.m : key.k), key.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, uint64_t(key.tb ? key.n : key.k),
                                          uint64_t(key.tb ? key.k : key.n), key.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(key.m), uint64_t(key.n), key.ldc));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspace;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attr, bytes] : aligns)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s.handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p.algo = result.algo;
    p.ok = true;
  }
  return p;
}

__global__ void add_bias_rows(float* C, const float* bias, int64_t m, int64_t n, int64_t ldc) {
  // column-major C[m,n]: bias[i] added to row i of every column
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < m * n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % m, j = idx / m;
    C[j * ldc + i] += bias[i];
  }
}

__global__ void scale_plus_bias(float* C, float beta, const float* bias, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < m * n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % m, j = idx / m;
    float& c = C[j * ldc + i];
    c = (beta == 0.f ? 0.f : beta * c) + (bias ? bias[i] : 0.f);
  }
}

}  // namespace

LtContext& lt_context() {
  static LtContext c = [] {
    LtContext made;
    CUBLAS_CHECK(cublasLtCreate(&made.handle));
    CUDA_CHECK(cudaMalloc(&made.workspace, kLtWorkspace));
    return made;
  }();
  return c;
}

void matmul_cublaslt(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
                     int mode) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(A) op(B) is empty: C = beta C (+ bias)
    scale_plus_bias<<<grid_for(m * n, 256), 256, 0, stream()>>>(C, beta, bias, m, n, ldc);
    CUDA_LAUNCHED("scale_plus_bias");
    return;
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  // the bias epilogue for 16-byte aligned biases; others get the separate kernel
  const bool fuse = bias != nullptr && alignment(bias) >= 16;
  Key key{trans_a,
          trans_b,
          fuse,
          m,
          n,
          k,
          lda,
          ldb,
          ldc,
          mode,
          alignment(A),
          alignment(B),
          alignment(C),
          fuse ? alignment(bias) : 256u};
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    Plan p = make_plan(s, key);
    if (!p.ok && key.bias) {  // no algorithm with the epilogue: plain GEMM + bias kernel
      Key plain = key;
      plain.bias = false;
      p = make_plan(s, plain);
    } else {
      p.fused_bias = key.bias;
    }
    if (!p.ok)
      cuda_fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
                "no algorithm for this GEMM shape and compute type");
    it = s.plans.emplace(key, p).first;
  }
  Plan& p = it->second;
  if (p.fused_bias)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  CUBLAS_CHECK(cublasLtMatmul(s.handle, p.op, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c, &p.algo, s.workspace,
                              kWorkspace, stream()));
  if (bias && !p.fused_bias) {
    add_bias_rows<<<grid_for(m * n, 256), 256, 0, stream()>>>(C, bias, m, n, ldc);
    CUDA_LAUNCHED("add_bias_rows");
  }
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int mode) {
  // row-major C[M,N] = op(A) op(B)  <=>  column-major C^T[N,M] = op(B)^T op(A)^T
  matmul_cublaslt(trans_b, trans_a, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc, nullptr, mode);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, int mode) {
  // out^T[OC,N] = W[OC,C] inp^T[C,N]; W row-major is W^T column-major (ld C)
  matmul_cublaslt(true, false, OC, N, C, 1.f, weight, C, inp, C, 0.f, out, OC, bias, mode);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, bool accumulate, int mode) {
  if (dinp)  // dinp^T[C,N] = W^T[C,OC] dout^T[OC,N]
    matmul_cublaslt(false, false, C, N, OC, 1.f, weight, C, dout, OC, 0.f, dinp, C, nullptr, mode);
  if (dweight)  // dW^T[C,OC] (+)= inp^T[C,N] dout[N,OC]
    matmul_cublaslt(false, true, C, OC, N, 1.f, inp, C, dout, OC, accumulate ? 1.f : 0.f, dweight, C, nullptr, mode);
  if (dbias) bias_backward(dbias, dout, N, OC, accumulate);
}

}  // namespace trident::kernels::cuda
