// The linear layers' FP8 GEMMs on CUDA (kernels/fp8.hpp: linear_forward8,
// linear_dgrad8, linear_wgrad8; tensorwise and delayed scaling, one scale
// per operand) through cuBLASLt's FP8 matmul: e4m3 or e5m2 operands (not
// both e5m2), float32 accumulation and output, each operand's
// dequantisation factor 1 / scale through CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER.
//
// cuBLASLt's FP8 GEMMs take only the "TN" layout (column-major: A
// transposed, B not), so the row-major calls read:
//   forward   out^T[OC, N]  = W[OC, C] . X^T[C, N]        A = W, B = X (as stored)
//   dgrad     dX^T[C, N]    = W^T[C, OC] . dY^T[OC, N]    A = W^T (a transposed copy), B = dY
//   wgrad     dW^T[C, OC] (+)= X^T[C, N] . dY[N, OC]      A = X^T, B = dY^T (transposed copies)
// the transposed FP8 copies made by fp8_transpose_kernel into scratch
// (Transformer Engine keeps them beside the rowwise copies; here they live
// for the one call). Where cuBLASLt's FP8 path does not apply (before
// sm_89; a dimension not a multiple of 16, an operand not 16-byte aligned;
// e5m2 times e5m2) the operands are decoded into float32 scratch and the
// float32 GEMM runs: the emulation's numbers.
//
// Blockwise scaling (linear_forward8b and so on) runs cuBLASLt's block-scaled
// FP8 GEMM (Hopper, cuBLAS 12.9 and later): the 1 x 128 tiles of the
// activations and gradients as CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (a
// factor per 128 values of k for each row: factors [ceil(k / 128), outer],
// outer-major), the weights' 128 x 128 blocks as BLK128x128_32F (factors
// [ceil(outer / 128), L4], k-major, L4 = ceil(k / 128) rounded up to a
// multiple of 4), never both operands in blocks; Transformer Engine's
// operands: forward A = W (blocks), B = X; dgrad A = W^T (its blocks
// transposed), B = dY; wgrad A = X^T, B = dY^T, both tiled along the tokens
// (their 128 x 1 tiles' factors are already VEC128's layout). Elsewhere the
// tiles are decoded into float32 and the float32 GEMM runs.
//
// Under TRIDENT_CUDA_EMULATION (tests/kernels/test_cuda_emulated.cpp) the
// cuBLASLt call is replaced by its definition, a float32 loop over the
// decoded codes: what the emulation checks is everything around it (which
// operand, which transpose, which leading dimension, which scale).
#include <cstring>
#ifndef TRIDENT_CUDA_EMULATION
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/cublaslt.cuh"
#endif

#include "kernels/cuda/common.cuh"
#include "kernels/fp8_code.hpp"

namespace trident::kernels::cuda {

namespace {

namespace code = ::trident::kernels::fp8_code;

// out[c, r] = in[r, c] for a rows x cols byte matrix, in 32 x 32 tiles through shared memory
__global__ void fp8_transpose_kernel(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[32][33];
  const int64_t tiles_c = (cols + 31) / 32;
  const int64_t r0 = int64_t(blockIdx.x) / tiles_c * 32, c0 = int64_t(blockIdx.x) % tiles_c * 32;
  for (int k = threadIdx.x; k < 32 * 32; k += blockDim.x) {
    const int64_t r = r0 + k / 32, c = c0 + k % 32;
    if (r < rows && c < cols) tile[k / 32][k % 32] = in[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.x; k < 32 * 32; k += blockDim.x) {
    const int64_t c = c0 + k / 32, r = r0 + k % 32;
    if (r < rows && c < cols) out[c * rows + r] = tile[k % 32][k / 32];
  }
}

__global__ void fp8_add_bias_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  GRID_STRIDE(i, N * OC) out[i] += bias[i % OC];
}

uint8_t* transposed(const uint8_t* in, int64_t rows, int64_t cols) {
  auto* out = static_cast<uint8_t*>(scratch_alloc(size_t(rows * cols)));
  const int64_t blocks = (rows + 31) / 32 * ((cols + 31) / 32);
  if (blocks > 0) {
    KERNEL_LAUNCH(fp8_transpose_kernel, unsigned(blocks), 256, 0)(out, in, rows, cols);
    CUDA_LAUNCHED("fp8_transpose_kernel");
  }
  return out;
}

// The dequantisation factors 1 / scale of A and B, in device memory (the scale pointers).
float* factors(float scale_a, float scale_b) {
  const float host[2] = {1.0f / scale_a, 1.0f / scale_b};
  auto* dev = static_cast<float*>(scratch_alloc(sizeof(host)));
  CUDA_CHECK(cudaMemcpyAsync(dev, host, sizeof(host), cudaMemcpyHostToDevice, stream()));
  return dev;
}

#ifdef TRIDENT_CUDA_EMULATION
// cublasLtMatmul's definition for FP8 A and B in the TN layout: column-major
// D[m, n] = sa sb sum_k A[k + i lda] B[k + j ldb] + beta D (float32 sums)
void matmul8(int64_t m, int64_t n, int64_t k, const uint8_t* A, int fa, int64_t lda, const uint8_t* B, int fb,
             int64_t ldb, const float* sab, float beta, float* D, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      for (int64_t p = 0; p < k; ++p) acc += code::decode(fa, A[p + i * lda]) * code::decode(fb, B[p + j * ldb]);
      float& d = D[i + j * ldd];
      d = sab[0] * sab[1] * acc + (beta == 0.f ? 0.f : beta * d);
    }
}
#else
struct Key {
  int64_t m, n, k, lda, ldb, ldd;
  int fa, fb;
  bool accumulate;
  bool operator<(const Key& o) const {
    return std::tie(m, n, k, lda, ldb, ldd, fa, fb, accumulate) <
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldd, o.fa, o.fb, o.accumulate);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct Plans {
  std::mutex mutex;
  std::map<Key, Plan> plans;
};

// cuBLASLt's first choice for the plan's GEMM (within the shared workspace), or a failure saying `none`
cublasLtMatmulAlgo_t best_algo(const LtContext& s, const Plan& p, const char* none) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kLtWorkspace;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(s.handle, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    cuda_fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__, none);
  return result.algo;
}

cudaDataType_t fp8_type(int format) { return format == 0 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

Plan make_plan(const LtContext& s, const Key& key) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int8_t fast = 0;  // accumulate in float32 throughout (no fast accumulation)
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, fp8_type(key.fa), uint64_t(key.k), uint64_t(key.m), key.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, fp8_type(key.fb), uint64_t(key.k), uint64_t(key.n), key.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, uint64_t(key.m), uint64_t(key.n), key.ldd));
  p.algo = best_algo(s, p, "no FP8 algorithm for this GEMM");
  return p;
}

void matmul8(int64_t m, int64_t n, int64_t k, const uint8_t* A, int fa, int64_t lda, const uint8_t* B, int fb,
             int64_t ldb, const float* sab, float beta, float* D, int64_t ldd) {
  static Plans cache;
  const LtContext& s = lt_context();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const Key key{m, n, k, lda, ldb, ldd, fa, fb, beta != 0.f};
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(s, key)).first;
  Plan& p = it->second;
  const float* sa = sab;
  const float* sb = sab + 1;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)));
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(s.handle, p.op, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algo, s.workspace,
                              kLtWorkspace, stream()));
}

bool fp8_device() {            // sm_89 and later have FP8 tensor cores
  static int cached[64] = {};  // per device: 0 unknown, 1 yes, 2 no
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int& c = cached[dev & 63];
  if (c == 0) {
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    c = major > 8 || (major == 8 && minor >= 9) ? 1 : 2;
  }
  return c == 1;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool fp8_gemm_fits(int64_t m, int64_t n, int64_t k, int fa, int fb, const void* A, const void* B, const void* D) {
  return !(fa == 1 && fb == 1) && m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && aligned16(A) && aligned16(B) &&
         aligned16(D) && fp8_device();
}
#endif

// A block-scaled operand's factors as cuBLASLt reads them: VEC128 s[(p / 128) * outer_n + i], BLK128x128
// s[(i / 128) * ld + p / 128] (i the outer index, p the index along k)
enum BlockMode { kVec128 = 1, kBlk128 = 2 };
struct Factors {
  const float* s = nullptr;
  int mode = kVec128;
  int64_t ld = 0;  // BLK128x128: L4
};

__global__ void fp8_relay_factors_kernel(float* out, const float* in, int64_t rows, int64_t cols, int64_t rs,
                                         int64_t cs) {
  GRID_STRIDE(i, rows * cols) out[(i / cols) * rs + (i % cols) * cs] = in[i];
}

// in [rows, cols] row-major to out[r * rs + c * cs], n_out values (the padding zeroed), freed by the caller
float* relaid(const float* in, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t n_out) {
  auto* out = static_cast<float*>(scratch_alloc(size_t(n_out) * sizeof(float)));
#ifdef TRIDENT_CUDA_EMULATION
  std::memset(out, 0, size_t(n_out) * sizeof(float));
#else
  CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(n_out) * sizeof(float), stream()));
#endif
  LAUNCH_GRID_STRIDE(fp8_relay_factors_kernel, rows * cols, out, in, rows, cols, rs, cs);
  return out;
}

int64_t pad4(int64_t x) { return (x + 3) / 4 * 4; }
int64_t tiles128(int64_t x) { return (x + 127) / 128; }

#ifdef TRIDENT_CUDA_EMULATION
float factor(const Factors& f, int64_t i, int64_t p, int64_t outer_n) {
  return f.mode == kVec128 ? f.s[(p / 128) * outer_n + i] : f.s[(i / 128) * f.ld + p / 128];
}
// cublasLtMatmul's definition for e4m3 A and B with block scales in the TN layout: column-major
// D[m, n] = sum_k (A[k + i lda] fa(i, k)) (B[k + j ldb] fb(j, k)) + beta D (float32 sums)
void matmul8_blocks(int64_t m, int64_t n, int64_t k, const uint8_t* A, int64_t lda, Factors fa, const uint8_t* B,
                    int64_t ldb, Factors fb, float beta, float* D, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      for (int64_t p = 0; p < k; ++p)
        acc += (code::decode(0, A[p + i * lda]) * factor(fa, i, p, m)) *
               (code::decode(0, B[p + j * ldb]) * factor(fb, j, p, n));
      float& d = D[i + j * ldd];
      d = acc + (beta == 0.f ? 0.f : beta * d);
    }
}
#else
struct BlockKey {
  int64_t m, n, k, lda, ldb, ldd;
  int ma, mb;
  bool accumulate;
  bool operator<(const BlockKey& o) const {
    return std::tie(m, n, k, lda, ldb, ldd, ma, mb, accumulate) <
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldd, o.ma, o.mb, o.accumulate);
  }
};

cublasLtMatmulMatrixScale_t scale_mode(int mode) {
  return mode == kVec128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

Plan make_block_plan(const LtContext& s, const BlockKey& key) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int8_t fast = 0;  // float32 accumulation throughout (Transformer Engine's blockwise recipe; PyTorch refuses it)
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  const cublasLtMatmulMatrixScale_t am = scale_mode(key.ma), bm = scale_mode(key.mb);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, uint64_t(key.k), uint64_t(key.m), key.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, uint64_t(key.k), uint64_t(key.n), key.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, uint64_t(key.m), uint64_t(key.n), key.ldd));
  p.algo = best_algo(s, p, "no block-scaled FP8 algorithm for this GEMM");
  return p;
}

void matmul8_blocks(int64_t m, int64_t n, int64_t k, const uint8_t* A, int64_t lda, Factors fa, const uint8_t* B,
                    int64_t ldb, Factors fb, float beta, float* D, int64_t ldd) {
  static std::mutex mutex;
  static std::map<BlockKey, Plan> plans;
  const LtContext& s = lt_context();
  std::lock_guard<std::mutex> lock(mutex);
  const BlockKey key{m, n, k, lda, ldb, ldd, fa.mode, fb.mode, beta != 0.f};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_block_plan(s, key)).first;
  Plan& p = it->second;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &fa.s, sizeof(fa.s)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &fb.s, sizeof(fb.s)));
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(s.handle, p.op, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algo, s.workspace,
                              kLtWorkspace, stream()));
}

// Hopper (sm_90) with cuBLAS 12.9 or later: the block scale modes; 16-byte aligned operands and factors,
// dimensions multiples of 16 (the factors' outer dimensions multiples of 4)
bool block_gemm_fits(int64_t m, int64_t n, int64_t k, const void* A, const void* B, const void* D, const void* sa,
                     const void* sb) {
  static const bool hopper_lt = [] {
    int dev = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9 && cublasLtGetVersion() >= 120900;
  }();
  return hopper_lt && m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && aligned16(A) && aligned16(B) && aligned16(D) &&
         aligned16(sa) && aligned16(sb);
}

// A blockwise operand decoded into float32 scratch (freed by the caller): the fallback's.
float* decoded_tiles(const uint8_t* q, const float* f, int64_t rows, int64_t cols, int64_t tr, int64_t tc) {
  auto* y = static_cast<float*>(scratch_alloc(size_t(rows * cols) * sizeof(float)));
  fp8_dequantize_tiled(y, q, f, rows, cols, tr, tc);
  return y;
}
#endif

#ifndef TRIDENT_CUDA_EMULATION
// Decoded into float32 scratch (freed by the caller): the fallback's operand.
float* decoded(const uint8_t* q, int64_t n, float scale, int format) {
  auto* y = static_cast<float*>(scratch_alloc(size_t(n) * sizeof(float)));
  fp8_dequantize(y, q, n, scale, format);
  return y;
}
#endif

}  // namespace

void fp8_linear_forward(float* out, const uint8_t* x, int fx, float sx, const uint8_t* w, int fw, float sw,
                        const float* bias, int64_t N, int64_t C, int64_t OC) {
  if (N == 0 || OC == 0) return;
#ifndef TRIDENT_CUDA_EMULATION  // the emulation's matmul8 takes every shape and format
  if (!fp8_gemm_fits(OC, N, C, fw, fx, w, x, out)) {
    float *xd = decoded(x, N * C, sx, fx), *wd = decoded(w, OC * C, sw, fw);
    linear_forward(out, xd, wd, bias, N, C, OC, 0);
    scratch_free(xd, size_t(N * C) * sizeof(float)), scratch_free(wd, size_t(OC * C) * sizeof(float));
    return;
  }
#endif
  float* sab = factors(sw, sx);
  matmul8(OC, N, C, w, fw, C, x, fx, C, sab, 0.f, out, OC);
  scratch_free(sab, 2 * sizeof(float));
  if (bias) LAUNCH_GRID_STRIDE(fp8_add_bias_kernel, N * OC, out, bias, N, OC);
}

void fp8_linear_dgrad(float* dinp, const uint8_t* dy, int fg, float sg, const uint8_t* w, int fw, float sw, int64_t N,
                      int64_t C, int64_t OC) {
  if (N == 0 || C == 0) return;
  uint8_t* wt = transposed(w, OC, C);  // [C, OC]
#ifndef TRIDENT_CUDA_EMULATION         // the emulation's matmul8 takes every shape and format
  if (!fp8_gemm_fits(C, N, OC, fw, fg, wt, dy, dinp)) {
    scratch_free(wt, size_t(OC * C));
    float *gd = decoded(dy, N * OC, sg, fg), *wd = decoded(w, OC * C, sw, fw);
    linear_backward(dinp, nullptr, nullptr, gd, nullptr, wd, N, C, OC, false, 0);
    scratch_free(gd, size_t(N * OC) * sizeof(float)), scratch_free(wd, size_t(OC * C) * sizeof(float));
    return;
  }
#endif
  float* sab = factors(sw, sg);
  matmul8(C, N, OC, wt, fw, OC, dy, fg, OC, sab, 0.f, dinp, C);
  scratch_free(sab, 2 * sizeof(float)), scratch_free(wt, size_t(OC * C));
}

void fp8_linear_wgrad(float* dw, const uint8_t* dy, int fg, float sg, const uint8_t* x, int fx, float sx, int64_t N,
                      int64_t C, int64_t OC, bool accumulate) {
  if (C == 0 || OC == 0) return;
  uint8_t *xt = transposed(x, N, C), *gt = transposed(dy, N, OC);  // [C, N], [OC, N]
#ifndef TRIDENT_CUDA_EMULATION  // the emulation's matmul8 takes every shape and format
  if (!fp8_gemm_fits(C, OC, N, fx, fg, xt, gt, dw)) {
    scratch_free(xt, size_t(N * C)), scratch_free(gt, size_t(N * OC));
    float *gd = decoded(dy, N * OC, sg, fg), *xd = decoded(x, N * C, sx, fx);
    linear_backward(nullptr, dw, nullptr, gd, xd, nullptr, N, C, OC, accumulate, 0);
    scratch_free(gd, size_t(N * OC) * sizeof(float)), scratch_free(xd, size_t(N * C) * sizeof(float));
    return;
  }
#endif
  float* sab = factors(sx, sg);
  matmul8(C, OC, N, xt, fx, N, gt, fg, N, sab, accumulate ? 1.f : 0.f, dw, C);
  scratch_free(sab, 2 * sizeof(float)), scratch_free(xt, size_t(N * C)), scratch_free(gt, size_t(N * OC));
}

void fp8_grouped_linear_forward(float* y, const uint8_t* x, int fx, const float* x_scales, const uint8_t* w, int fw,
                                const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    fp8_linear_forward(y + r0 * OC, x + r0 * C, fx, x_scales[g], w + g * OC * C, fw, w_scales[g], nullptr, rows, C, OC);
  }
}

void fp8_linear_forward_blocks(float* out, const uint8_t* x, const float* fx, const uint8_t* w, const float* fw,
                               const float* bias, int64_t N, int64_t C, int64_t OC) {
  if (N == 0 || OC == 0) return;
  const int64_t L = tiles128(C), L4 = pad4(L), Bo = tiles128(OC);
  float* sa = relaid(fw, Bo, L, L4, 1, Bo * L4);  // W's blocks [Bo, L]: k-major rows of L4
  float* sb = relaid(fx, N, L, 1, N, L * N);      // X's tiles [N, L]: [L, N]
#ifndef TRIDENT_CUDA_EMULATION                    // the emulation's matmul8_blocks takes every shape
  if (!block_gemm_fits(OC, N, C, w, x, out, sa, sb)) {
    scratch_free(sa, size_t(Bo * L4) * sizeof(float)), scratch_free(sb, size_t(L * N) * sizeof(float));
    float *xd = decoded_tiles(x, fx, N, C, 1, 128), *wd = decoded_tiles(w, fw, OC, C, 128, 128);
    linear_forward(out, xd, wd, bias, N, C, OC, 0);
    scratch_free(xd, size_t(N * C) * sizeof(float)), scratch_free(wd, size_t(OC * C) * sizeof(float));
    return;
  }
#endif
  matmul8_blocks(OC, N, C, w, C, {sa, kBlk128, L4}, x, C, {sb, kVec128, 0}, 0.f, out, OC);
  scratch_free(sa, size_t(Bo * L4) * sizeof(float)), scratch_free(sb, size_t(L * N) * sizeof(float));
  if (bias) LAUNCH_GRID_STRIDE(fp8_add_bias_kernel, N * OC, out, bias, N, OC);
}

void fp8_linear_dgrad_blocks(float* dinp, const uint8_t* dy, const float* fg, const uint8_t* w, const float* fw,
                             int64_t N, int64_t C, int64_t OC) {
  if (N == 0 || C == 0) return;
  const int64_t L = tiles128(OC), L4 = pad4(L), Bc = tiles128(C);
  uint8_t* wt = transposed(w, OC, C);             // [C, OC]: W^T, whose blocks are W's transposed
  float* sa = relaid(fw, L, Bc, 1, L4, Bc * L4);  // W's blocks [L, Bc]: W^T's [Bc, L4]
  float* sb = relaid(fg, N, L, 1, N, L * N);      // dY's tiles [N, L]: [L, N]
#ifndef TRIDENT_CUDA_EMULATION                    // the emulation's matmul8_blocks takes every shape
  if (!block_gemm_fits(C, N, OC, wt, dy, dinp, sa, sb)) {
    scratch_free(sa, size_t(Bc * L4) * sizeof(float)), scratch_free(sb, size_t(L * N) * sizeof(float));
    scratch_free(wt, size_t(OC * C));
    float *gd = decoded_tiles(dy, fg, N, OC, 1, 128), *wd = decoded_tiles(w, fw, OC, C, 128, 128);
    linear_backward(dinp, nullptr, nullptr, gd, nullptr, wd, N, C, OC, false, 0);
    scratch_free(gd, size_t(N * OC) * sizeof(float)), scratch_free(wd, size_t(OC * C) * sizeof(float));
    return;
  }
#endif
  matmul8_blocks(C, N, OC, wt, OC, {sa, kBlk128, L4}, dy, OC, {sb, kVec128, 0}, 0.f, dinp, C);
  scratch_free(sa, size_t(Bc * L4) * sizeof(float)), scratch_free(sb, size_t(L * N) * sizeof(float));
  scratch_free(wt, size_t(OC * C));
}

void fp8_linear_wgrad_blocks(float* dw, const uint8_t* dy, const float* fg, const uint8_t* x, const float* fx,
                             int64_t N, int64_t C, int64_t OC, bool accumulate) {
  if (C == 0 || OC == 0) return;
    // X's and dY's 128 x 1 tiles: factors [ceil(N / 128), C] and [.., OC], VEC128's layout for X^T and dY^T
#ifndef TRIDENT_CUDA_EMULATION  // the emulation's matmul8_blocks takes every shape
  if (!block_gemm_fits(C, OC, N, x, dy, dw, fx, fg)) {
    float *gd = decoded_tiles(dy, fg, N, OC, 128, 1), *xd = decoded_tiles(x, fx, N, C, 128, 1);
    linear_backward(nullptr, dw, nullptr, gd, xd, nullptr, N, C, OC, accumulate, 0);
    scratch_free(gd, size_t(N * OC) * sizeof(float)), scratch_free(xd, size_t(N * C) * sizeof(float));
    return;
  }
#endif
  uint8_t *xt = transposed(x, N, C), *gt = transposed(dy, N, OC);  // [C, N], [OC, N]
  matmul8_blocks(C, OC, N, xt, N, {fx, kVec128, 0}, gt, N, {fg, kVec128, 0}, accumulate ? 1.f : 0.f, dw, C);
  scratch_free(xt, size_t(N * C)), scratch_free(gt, size_t(N * OC));
}

}  // namespace trident::kernels::cuda
