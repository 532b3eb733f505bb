// CPU GEMM: oneDNN sgemm for float, a reference loop nest for double.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <atomic>
#include <chrono>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/gemm.hpp"
#include "kernels/precision.hpp"

namespace trident::kernels {

static std::string dnnl_status_string(dnnl_status_t s) { return fmt::format("dnnl_status_t {}", int(s)); }
#define DNNL_CHECK(stmt) TRIDENT_LIBRARY_CHECK("oneDNN", stmt, dnnl_success, dnnl_status_string)

namespace {

std::atomic<int64_t> g_calls[3];  // cpu_gemm_calls, by Precision
void count_call(Precision math) { g_calls[size_t(math)].fetch_add(1, std::memory_order_relaxed); }

// bf16 GEMM on the CPU: oneDNN's matmul primitive on bf16 operands with an
// fp32 result (AMX or AVX512-BF16 where the CPU has them). A CPU without
// AVX-512 has no bf16 matmul in oneDNN at all (it answers "unimplemented"):
// there the bf16-valued fp32 operands go to sgemm, which computes the same
// products exactly (8-bit mantissas) with fp32 accumulation, and a warning
// says so once. The fp32
// operands are converted in their own layout into per-thread buffers; the
// conversion is exact when they hold bf16 values, as every GEMM input of a
// bf16 run does. One primitive per shape, cached. The implementation oneDNN
// picks is logged once; a reference (slow) one is a warning.
struct Bf16Key {
  bool ta, tb;
  int64_t M, N, K, ldc;
  float alpha, beta;
  bool operator<(const Bf16Key& o) const {
    return std::tie(ta, tb, M, N, K, ldc, alpha, beta) < std::tie(o.ta, o.tb, o.M, o.N, o.K, o.ldc, o.alpha, o.beta);
  }
};
struct Bf16Plan {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
};
struct Bf16State {
  std::mutex mutex;
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  std::map<Bf16Key, Bf16Plan> plans;
  bool reported = false;
  bool unavailable = false;  // this CPU has no bf16 matmul: sgemm instead
};

Bf16State& bf16_state() {
  static Bf16State s;
  if (!s.engine) {
    DNNL_CHECK(dnnl_engine_create(&s.engine, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&s.stream, s.engine, dnnl_stream_default_flags));
  }
  return s;
}

Bf16Plan make_bf16_plan(Bf16State& s, const Bf16Key& k) {
  // stored operands, contiguous: A is M x K (or K x M when transposed), B is K x N (or N x K)
  dnnl_dims_t a_dims = {k.M, k.K}, b_dims = {k.K, k.N}, c_dims = {k.M, k.N};
  dnnl_dims_t a_str = {k.ta ? 1 : k.K, k.ta ? k.M : 1}, b_str = {k.tb ? 1 : k.N, k.tb ? k.K : 1}, c_str = {k.ldc, 1};
  dnnl_memory_desc_t a_md, b_md, c_md;
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_str));
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_str));
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str));
  dnnl_matmul_desc_t md;
  DNNL_CHECK(dnnl_matmul_desc_init(&md, &a_md, &b_md, nullptr, &c_md));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  if (k.alpha != 1.f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k.alpha));
  dnnl_post_ops_t po = nullptr;
  if (k.beta != 0.f) {
    DNNL_CHECK(dnnl_post_ops_create(&po));
    DNNL_CHECK(dnnl_post_ops_append_sum(po, k.beta));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
  }
  dnnl_primitive_desc_t pd;
  const dnnl_status_t status = dnnl_primitive_desc_create(&pd, &md, attr, s.engine, nullptr);
  if (status == dnnl_unimplemented) {
    log::info(  // the trainer's start-up warning says what this costs (kernels::cpu_has_bf16_instructions)
        "bf16 GEMM: oneDNN has no bf16 matmul on this CPU (it needs AVX-512, AVX512-BF16 or AMX); bf16 "
        "operands are multiplied by fp32 sgemm instead (exact products, fp32 accumulation)");
    s.unavailable = s.reported = true;
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return {};
  }
  DNNL_CHECK(status);
  if (!s.reported) {
    const char* impl = nullptr;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const std::string name = impl ? impl : "?";
    if (name.find("ref") != std::string::npos)
      log::warn("bf16 GEMM: oneDNN chose '{}', a reference implementation (slow): this CPU lacks AVX512-BF16 / AMX",
                name);
    else
      log::info("bf16 GEMM: oneDNN matmul '{}'", name);
    s.reported = true;
  }
  Bf16Plan p;
  DNNL_CHECK(dnnl_primitive_create(&p.prim, pd));
  DNNL_CHECK(dnnl_memory_create(&p.a, &a_md, s.engine, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&p.b, &b_md, s.engine, DNNL_MEMORY_NONE));
  DNNL_CHECK(dnnl_memory_create(&p.c, &c_md, s.engine, DNNL_MEMORY_NONE));
  dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  return p;
}

// rows x cols of src (row stride ld) into dst, contiguous, as bf16
void to_bf16(std::vector<uint16_t>& dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  dst.resize(static_cast<size_t>(rows * cols));
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[size_t(r * cols + c)] = f32_to_bf16(src[r * ld + c]);
}

// The bf16 matmul on contiguous bf16 operands (A is M x K or, transposed,
// K x M; B is K x N or N x K). false: no bf16 matmul on this CPU.
bool run_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, const uint16_t* B,
              float beta, float* C, int64_t ldc) {
  Bf16State& s = bf16_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.unavailable) return false;
  const Bf16Key key{ta, tb, M, N, K, ldc, alpha, beta};
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    Bf16Plan plan = make_bf16_plan(s, key);
    if (!plan.prim) return false;
    it = s.plans.emplace(key, plan).first;
  }
  Bf16Plan& p = it->second;
  DNNL_CHECK(dnnl_memory_set_data_handle(p.a, const_cast<uint16_t*>(A)));
  DNNL_CHECK(dnnl_memory_set_data_handle(p.b, const_cast<uint16_t*>(B)));
  DNNL_CHECK(dnnl_memory_set_data_handle(p.c, C));
  const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  DNNL_CHECK(dnnl_primitive_execute(p.prim, s.stream, 3, args));
  DNNL_CHECK(dnnl_stream_wait(s.stream));
  return true;
}

// false: no bf16 matmul on this CPU (the caller uses sgemm)
bool gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (bf16_state().unavailable) return false;
  thread_local std::vector<uint16_t> a16, b16;
  to_bf16(a16, A, ta ? K : M, ta ? M : K, lda);
  to_bf16(b16, B, tb ? N : K, tb ? K : N, ldb);
  return run_bf16(ta, tb, M, N, K, alpha, a16.data(), b16.data(), beta, C, ldc);
}

// An In16 operand of rows x cols as bf16: its copy, or the fp32 values converted into scratch.
const uint16_t* bf16_of(In16 x, int64_t rows, int64_t cols, std::vector<uint16_t>& scratch) {
  if (x.bf16) return x.bf16;
  to_bf16(scratch, x.f32, rows, cols, cols);
  return scratch.data();
}
// ... and as fp32: its values, or the copy widened into scratch.
const float* f32_of(In16 x, int64_t n, std::vector<float>& scratch) {
  if (x.f32) return x.f32;
  scratch.resize(size_t(n));
  float* out = scratch.data();
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x.bf16[i]);
  return out;
}

}  // namespace

namespace cpu {
// the CPU GEMM: oneDNN for float (or its bf16 path), a plain loop for double
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
          T beta, T* C, int64_t ldc, Precision math);

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Precision math) {
  count_call(math);
  if (math == Precision::bf16 && M > 0 && N > 0 && K > 0 &&
      gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
  DNNL_CHECK(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc, Precision) {
#pragma omp parallel for collapse(2)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * C[i * ldc + j]);
    }
}
}  // namespace cpu

// out[n, o] = bias[o]: the linear's output before its GEMM adds (beta = 1)
template <typename T>
static void bias_rows(T* out, const T* bias, int64_t N, int64_t OC) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
}

// dbias[o] (+)= sum_n dout[n, o], each column summed in row order; a block
// of columns per task, walked row by row (contiguous reads)
template <typename T>
static void column_sums(T* dbias, const T* dout, int64_t N, int64_t OC, bool accumulate) {
  constexpr int64_t kBlock = 256;
#pragma omp parallel for
  for (int64_t o0 = 0; o0 < OC; o0 += kBlock) {
    const int64_t width = std::min(kBlock, OC - o0);
    T s[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC + o0;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) s[j] += row[j];
    }
    for (int64_t j = 0; j < width; ++j) dbias[o0 + j] = accumulate ? dbias[o0 + j] + s[j] : s[j];
  }
}

namespace cpu {
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                    Precision math) {
  if (bias) bias_rows(out, bias, N, OC);
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias ? T(1) : T(0), out, OC, math);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC, bool accumulate, Precision math) {
  if (dinp) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C, math);
  if (dweight) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, accumulate ? T(1) : T(0), dweight, C, math);
  if (dbias) column_sums(dbias, dout, N, OC, accumulate);
}
}  // namespace cpu

template void cpu::linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                         Precision);
template void cpu::linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                          int64_t, Precision);
template void cpu::linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                          int64_t, int64_t, bool, Precision);
template void cpu::linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                           int64_t, int64_t, int64_t, bool, Precision);

void gemm16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, In16 A, In16 B, float beta, float* C,
            int64_t ldc, Precision math) {
  TRIDENT_CHECK((A.f32 || A.bf16) && (B.f32 || B.bf16), "gemm16: an operand has neither fp32 values nor a bf16 copy");
  if (M <= 0 || N <= 0) return;
  count_call(math);
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  if (math == Precision::bf16 && K > 0 && !bf16_state().unavailable) {
    thread_local std::vector<uint16_t> a16, b16;
    const uint16_t* a = bf16_of(A, a_rows, a_cols, a16);
    const uint16_t* b = bf16_of(B, b_rows, b_cols, b16);
    if (run_bf16(ta, tb, M, N, K, alpha, a, b, beta, C, ldc)) return;
  }
  thread_local std::vector<float> a32, b32;
  const float* a = f32_of(A, a_rows * a_cols, a32);
  const float* b = f32_of(B, b_rows * b_cols, b32);
  DNNL_CHECK(dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc));
}

void linear_forward16(float* out, In16 inp, In16 weight, const float* bias, int64_t N, int64_t C, int64_t OC,
                      Precision math) {
  if (bias) bias_rows(out, bias, N, OC);
  gemm16(false, true, N, OC, C, 1.f, inp, weight, bias ? 1.f : 0.f, out, OC, math);
}

void linear_backward16(float* dinp, float* dweight, float* dbias, In16 dout, In16 inp, In16 weight, int64_t N,
                       int64_t C, int64_t OC, bool accumulate, Precision math) {
  if (dinp) gemm16(false, false, N, C, OC, 1.f, dout, weight, 0.f, dinp, C, math);
  if (dweight) gemm16(true, false, OC, C, N, 1.f, dout, inp, accumulate ? 1.f : 0.f, dweight, C, math);
  if (dbias) {
    thread_local std::vector<float> d32;
    const float* d = f32_of(dout, N * OC, d32);
    column_sums(dbias, d, N, OC, accumulate);
  }
}

void set_num_threads(int n) { omp_set_num_threads(n); }

double measure_gemm_peak(double seconds, Precision math) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = 1024;
  std::vector<float> a(size_t(n * n), 1.0f), b(size_t(n * n), 0.5f), c(size_t(n * n));
  gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n, math);
  double best = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n, math);
    best = std::max(best, 2.0 * double(n * n * n) / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}
int num_threads() { return omp_get_max_threads(); }

int64_t cpu_gemm_calls(Precision math) { return g_calls[size_t(math)].load(std::memory_order_relaxed); }

}  // namespace trident::kernels
