// The CPU/CUDA choice, made once per op: every public kernel entry point
// with a CUDA twin runs the twin (kernels/cuda/cuda_kernels.hpp, timed when
// kernel timing is on) when the buffer named in its ROUTE line lies in device
// memory, and its CPU implementation (kernels/cpu/cpu_kernels.hpp)
// otherwise. Only float buffers reach the GPU; double (the tests' reference
// precision) always runs on the CPU. A build without CUDA compiles the
// choice away. The CPU and CUDA files hold no routing.
#include <type_traits>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

#ifdef TRIDENT_HAVE_CUDA
#include "core/device_memory.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
#define ROUTE(T, ptr, cuda_call, cpu_call)                              \
  do {                                                                  \
    if constexpr (std::is_same_v<T, float>) {                           \
      if (::trident::is_device_pointer(ptr)) {                          \
        ::trident::kernels::cuda::KernelTimer trident_timer_(__func__); \
        return cuda_call;                                               \
      }                                                                 \
    }                                                                   \
    return cpu_call;                                                    \
  } while (0)
#else
#define ROUTE(T, ptr, cuda_call, cpu_call) return cpu_call
#endif

namespace trident::kernels {

#ifdef TRIDENT_HAVE_CUDA
namespace {
std::vector<cuda::AdamWRangeDevice> device_ranges(const std::vector<AdamWRange>& ranges) {
  std::vector<cuda::AdamWRangeDevice> dr;
  for (const auto& r : ranges) dr.push_back({r.offset, r.size, float(r.weight_decay)});
  return dr;
}
}  // namespace
#endif

// kernels/activation.hpp

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  ROUTE(T, out, cuda::gelu_forward(out, inp, n), cpu::gelu_forward(out, inp, n));
}
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  ROUTE(T, dinp, cuda::gelu_backward(dinp, inp, dout, n), cpu::gelu_backward(dinp, inp, dout, n));
}
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
  ROUTE(T, out, cuda::swiglu_forward(out, inp, N, F), cpu::swiglu_forward(out, inp, N, F));
}
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  ROUTE(T, dinp, cuda::swiglu_backward(dinp, inp, dout, N, F), cpu::swiglu_backward(dinp, inp, dout, N, F));
}

// kernels/adamw.hpp

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp) {
  ROUTE(T, param,
        cuda::adamw_update_multi(param, m, v, grad, {{0, n, float(hp.weight_decay)}}, hp.lr, hp.beta1, hp.beta2, hp.eps,
                                 hp.step, hp.grad_scale),
        cpu::adamw_update(param, m, v, grad, n, hp));
}
template <typename T>
void adamw_update_multi(T* param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges,
                        const AdamWParams& hp) {
  ROUTE(T, param,
        cuda::adamw_update_multi(param, m, v, grad, device_ranges(ranges), hp.lr, hp.beta1, hp.beta2, hp.eps, hp.step,
                                 hp.grad_scale),
        cpu::adamw_update_multi(param, m, v, grad, ranges, hp));
}

// kernels/attention.hpp

template <typename T>
void attention_lse(T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  ROUTE(T, qkv, cuda::attention_lse(lse, qkv, B, T_, H, KV, D, doc_start),
        cpu::attention_lse(lse, qkv, B, T_, H, KV, D, doc_start));
}
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                       const int32_t* doc_start) {
  ROUTE(T, qkv, cuda::attention_forward(out, lse, qkv, B, T_, H, KV, D, doc_start),
        cpu::attention_forward(out, lse, qkv, B, T_, H, KV, D, doc_start));
}
template <typename T>
void attention_delta(T* delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H, int64_t D) {
  ROUTE(T, out, cuda::attention_delta(delta, dout, out, ldo, B, Tq, H, D),
        cpu::attention_delta(delta, dout, out, ldo, B, Tq, H, D));
}
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B, int64_t T_,
                        int64_t H, int64_t KV, int64_t D, const int32_t* doc_start) {
  ROUTE(T, qkv, cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T_, H, KV, D, doc_start),
        cpu::attention_backward(dqkv, dout, qkv, out, lse, B, T_, H, KV, D, doc_start));
}
template <typename T>
void attention_block_forward(T* out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge) {
  ROUTE(T, a.q, cuda::attention_block_forward(out, ldo, lse, a, merge),
        cpu::attention_block_forward(out, ldo, lse, a, merge));
}
template <typename T>
void attention_block_backward(T* dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo,
                              const T* lse, const T* delta, const AttentionBlock<T>& a) {
  ROUTE(T, a.q, cuda::attention_block_backward(dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta, a),
        cpu::attention_block_backward(dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta, a));
}

// kernels/buffer.hpp

template <typename T>
void fill_zero(T* x, int64_t n) {
  if (n <= 0) return;
  ROUTE(T, x, cuda::fill_zero(x, n), cpu::fill_zero(x, n));
}
template <typename T>
double sum(const T* x, int64_t n) {
  ROUTE(T, x, cuda::sum(x, n), cpu::sum(x, n));
}
template <typename T>
double sum_of_squares_ranges(const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  ROUTE(T, x, cuda::sum_of_squares_ranges(x, ranges), cpu::sum_of_squares_ranges(x, ranges));
}

// kernels/cross_entropy.hpp

template <typename T>
void softmax_cross_entropy(T* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           T dscale) {
  ROUTE(T, logits, cuda::softmax_cross_entropy(losses, logits, targets, N, V, Vvalid, dscale),
        cpu::softmax_cross_entropy(losses, logits, targets, N, V, Vvalid, dscale));
}
template <typename T>
void cross_entropy_local_max(T* row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid) {
  ROUTE(T, logits, cuda::cross_entropy_local_max(row_max, logits, N, V, Vvalid),
        cpu::cross_entropy_local_max(row_max, logits, N, V, Vvalid));
}
template <typename T>
void cross_entropy_local_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V,
                              int64_t Vvalid, int64_t vocab_begin) {
  ROUTE(T, logits, cuda::cross_entropy_local_sums(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin),
        cpu::cross_entropy_local_sums(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin));
}
template <typename T>
void cross_entropy_finish(T* losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vvalid, int64_t vocab_begin, T dscale) {
  ROUTE(T, logits,
        cuda::cross_entropy_finish(losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, dscale),
        cpu::cross_entropy_finish(losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, dscale));
}

// kernels/embedding.hpp

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V) {
  ROUTE(T, out, cuda::embedding_forward(out, tokens, wte, N, C, vocab_begin, V),
        cpu::embedding_forward(out, tokens, wte, N, C, vocab_begin, V));
}
template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_begin,
                        int64_t V) {
  ROUTE(T, dwte, cuda::embedding_backward(dwte, dout, tokens, N, C, vocab_begin, V),
        cpu::embedding_backward(dwte, dout, tokens, N, C, vocab_begin, V));
}
template <typename T>
void position_forward(T* out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                      const int32_t* doc_start) {
  ROUTE(T, out, cuda::position_forward(out, inp, wpe, row_begin, rows, T_, C, doc_start),
        cpu::position_forward(out, inp, wpe, row_begin, rows, T_, C, doc_start));
}
template <typename T>
void position_backward(T* dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
                       const int32_t* doc_start) {
  ROUTE(T, dwpe, cuda::position_backward(dwpe, dout, row_begin, rows, T_, C, doc_start),
        cpu::position_backward(dwpe, dout, row_begin, rows, T_, C, doc_start));
}

// kernels/gemm.hpp

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  ROUTE(T, C, cuda::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
        cpu::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC) {
  ROUTE(T, out, cuda::linear_forward(out, inp, weight, bias, N, C, OC),
        cpu::linear_forward(out, inp, weight, bias, N, C, OC));
}
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
                     int64_t OC, bool accumulate) {
  ROUTE(T, dout, cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate),
        cpu::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate));
}

// kernels/norm.hpp

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                       double eps) {
  ROUTE(T, out, cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps),
        cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps));
}
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t N, int64_t C, bool accumulate) {
  ROUTE(T, dout, cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate),
        cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate));
}
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, double eps) {
  ROUTE(T, out, cuda::rmsnorm_forward(out, rstd, inp, weight, N, C, eps),
        cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps));
}
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C, bool accumulate) {
  ROUTE(T, dout, cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, accumulate),
        cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, accumulate));
}

// kernels/precision.hpp

template <typename T>
void round_to_storage(T* x, int64_t n, Precision p) {
  if (p == Precision::fp32) return;
  ROUTE(T, x, cuda::round_to_storage(x, n, p == Precision::bf16 ? 1 : 2), cpu::round_to_storage(x, n, p));
}
template <typename T>
int64_t count_nonfinite(const T* x, int64_t n) {
  ROUTE(T, x, cuda::count_nonfinite(x, n), cpu::count_nonfinite(x, n));
}
template <typename T>
void pack_16(uint16_t* dst, const T* src, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "pack_16 needs a 16-bit format");
  ROUTE(T, src, cuda::pack_16(dst, src, n, p == Precision::bf16 ? 1 : 2), cpu::pack_16(dst, src, n, p));
}
template <typename T>
void store_16(T* x, uint16_t* dst, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "store_16 needs a 16-bit format");
  ROUTE(T, x,
        (cuda::round_to_storage(x, n, p == Precision::bf16 ? 1 : 2),
         cuda::pack_16(dst, x, n, p == Precision::bf16 ? 1 : 2)),
        cpu::store_16(x, dst, n, p));
}
template <typename T>
void unpack_16(T* dst, const uint16_t* src, int64_t n, Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "unpack_16 needs a 16-bit format");
  ROUTE(T, dst, cuda::unpack_16(dst, src, n, p == Precision::bf16 ? 1 : 2), cpu::unpack_16(dst, src, n, p));
}

// kernels/residual.hpp

template <typename T>
void residual_forward(T* out, const T* a, const T* b, const T* bias, int64_t N, int64_t C) {
  ROUTE(T, out, cuda::residual_forward(out, a, b, bias, N, C), cpu::residual_forward(out, a, b, bias, N, C));
}
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C, bool accumulate) {
  ROUTE(T, dout, cuda::bias_backward(dbias, dout, N, C, accumulate), cpu::bias_backward(dbias, dout, N, C, accumulate));
}

// kernels/rotary.hpp

template <typename T>
void rope_forward(T* qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start) {
  ROUTE(T, qkv, cuda::rope_forward(qkv, table, B, T_, H, KV, D, doc_start),
        cpu::rope_forward(qkv, table, B, T_, H, KV, D, doc_start));
}
template <typename T>
void rope_backward(T* dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start) {
  ROUTE(T, dqkv, cuda::rope_backward(dqkv, table, B, T_, H, KV, D, doc_start),
        cpu::rope_backward(dqkv, table, B, T_, H, KV, D, doc_start));
}

#define INSTANTIATE(T)                                                                                                 \
  template void gelu_forward<T>(T * out, const T* inp, int64_t n);                                                     \
  template void gelu_backward<T>(T * dinp, const T* inp, const T* dout, int64_t n);                                    \
  template void swiglu_forward<T>(T * out, const T* inp, int64_t N, int64_t F);                                        \
  template void swiglu_backward<T>(T * dinp, const T* inp, const T* dout, int64_t N, int64_t F);                       \
  template void adamw_update<T>(T * param, T * m, T * v, const T* grad, int64_t n, const AdamWParams& hp);             \
  template void adamw_update_multi<T>(T * param, T * m, T * v, const T* grad, const std::vector<AdamWRange>& ranges,   \
                                      const AdamWParams& hp);                                                          \
  template void attention_lse<T>(T * lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,       \
                                 const int32_t* doc_start);                                                            \
  template void attention_forward<T>(T * out, T * lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV,     \
                                     int64_t D, const int32_t* doc_start);                                             \
  template void attention_delta<T>(T * delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq,         \
                                   int64_t H, int64_t D);                                                              \
  template void attention_backward<T>(T * dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,    \
                                      int64_t T_, int64_t H, int64_t KV, int64_t D, const int32_t* doc_start);         \
  template void attention_block_forward<T>(T * out, int64_t ldo, T * lse, const AttentionBlock<T>& a, bool merge);     \
  template void attention_block_backward<T>(T * dq, int64_t lddq, T * dk, T * dv, int64_t lddkv, const T* dout,        \
                                            int64_t lddo, const T* lse, const T* delta, const AttentionBlock<T>& a);   \
  template void fill_zero<T>(T * x, int64_t n);                                                                        \
  template double sum<T>(const T* x, int64_t n);                                                                       \
  template double sum_of_squares_ranges<T>(const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges);        \
  template void softmax_cross_entropy<T>(T * losses, T * logits, const int32_t* targets, int64_t N, int64_t V,         \
                                         int64_t Vvalid, T dscale);                                                    \
  template void cross_entropy_local_max<T>(T * row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid);        \
  template void cross_entropy_local_sums<T>(T * sums, const T* logits, const T* row_max, const int32_t* targets,       \
                                            int64_t N, int64_t V, int64_t Vvalid, int64_t vocab_begin);                \
  template void cross_entropy_finish<T>(T * losses, T * logits, const T* row_max, const T* sums,                       \
                                        const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,                  \
                                        int64_t vocab_begin, T dscale);                                                \
  template void embedding_forward<T>(T * out, const int32_t* tokens, const T* wte, int64_t N, int64_t C,               \
                                     int64_t vocab_begin, int64_t V);                                                  \
  template void embedding_backward<T>(T * dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,            \
                                      int64_t vocab_begin, int64_t V);                                                 \
  template void position_forward<T>(T * out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_,  \
                                    int64_t C, const int32_t* doc_start);                                              \
  template void position_backward<T>(T * dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,  \
                                     const int32_t* doc_start);                                                        \
  template void gemm<T>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, \
                        const T* B, int64_t ldb, T beta, T* C, int64_t ldc);                                           \
  template void linear_forward<T>(T * out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,         \
                                  int64_t OC);                                                                         \
  template void linear_backward<T>(T * dinp, T * dweight, T * dbias, const T* dout, const T* inp, const T* weight,     \
                                   int64_t N, int64_t C, int64_t OC, bool accumulate);                                 \
  template void layernorm_forward<T>(T * out, T * mean, T * rstd, const T* inp, const T* weight, const T* bias,        \
                                     int64_t N, int64_t C, double eps);                                                \
  template void layernorm_backward<T>(T * dinp, T * dweight, T * dbias, const T* dout, const T* inp, const T* weight,  \
                                      const T* mean, const T* rstd, int64_t N, int64_t C, bool accumulate);            \
  template void rmsnorm_forward<T>(T * out, T * rstd, const T* inp, const T* weight, int64_t N, int64_t C,             \
                                   double eps);                                                                        \
  template void rmsnorm_backward<T>(T * dinp, T * dweight, const T* dout, const T* inp, const T* weight,               \
                                    const T* rstd, int64_t N, int64_t C, bool accumulate);                             \
  template void round_to_storage<T>(T * x, int64_t n, Precision p);                                                    \
  template int64_t count_nonfinite<T>(const T* x, int64_t n);                                                          \
  template void pack_16<T>(uint16_t * dst, const T* src, int64_t n, Precision p);                                      \
  template void store_16<T>(T * x, uint16_t * dst, int64_t n, Precision p);                                            \
  template void unpack_16<T>(T * dst, const uint16_t* src, int64_t n, Precision p);                                    \
  template void residual_forward<T>(T * out, const T* a, const T* b, const T* bias, int64_t N, int64_t C);             \
  template void bias_backward<T>(T * dbias, const T* dout, int64_t N, int64_t C, bool accumulate);                     \
  template void rope_forward<T>(T * qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, \
                                const int32_t* doc_start);                                                             \
  template void rope_backward<T>(T * dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV,          \
                                 int64_t D, const int32_t* doc_start);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::kernels
