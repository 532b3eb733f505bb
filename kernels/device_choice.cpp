// The CPU/CUDA choice, made once per op: every public kernel entry point
// with a CUDA twin runs the twin (kernels/cuda/cuda_kernels.hpp, timed when
// kernel timing is on) when the buffer named in its KERNEL_OP line lies in
// device memory, and its CPU implementation (kernels::cpu, in
// cpu/X_cpu.cpp) otherwise. Only float buffers reach the GPU; double (the
// tests' reference precision) always runs on the CPU. A build without CUDA
// compiles the choice away. The CPU and CUDA files hold no choice.
#include <type_traits>

#include "core/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/norm.hpp"
#include "kernels/precision.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"

#ifdef TRIDENT_HAVE_CUDA
#include "core/device_memory.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
// the GEMMs' math as the CUDA files take it (kernels/cuda/cuda_kernels.hpp)
[[maybe_unused]] static int cuda_mode(trident::Precision p) {
  return p == trident::Precision::bf16 ? 1 : p == trident::Precision::fp16 ? 2 : 0;
}
#define CHOOSE(T, ptr, cuda_call, cpu_call)                             \
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
#define CHOOSE(T, ptr, cuda_call, cpu_call) return cpu_call
#endif

// One op with a CUDA twin: declares its CPU implementation cpu::name (defined and
// instantiated in cpu/X_cpu.cpp), defines the public kernels::name (declared
// in X.hpp) and instantiates it for float and double. params: the
// parenthesised parameter list; args: the parenthesised argument list.
#define KERNEL_OP(ret, name, params, args, ptr, cuda_call) \
  namespace cpu {                                          \
  template <typename T>                                    \
  ret name params;                                         \
  }                                                        \
  template <typename T>                                    \
  ret name params {                                        \
    CHOOSE(T, ptr, cuda_call, cpu::name args);             \
  }                                                        \
  template decltype(name<float>) name<float>;              \
  template decltype(name<double>) name<double>

namespace trident::kernels {

#ifdef TRIDENT_HAVE_CUDA
namespace {

std::vector<cuda::AdamWRangeDevice> device_ranges(const std::vector<AdamWRange>& ranges) {
  std::vector<cuda::AdamWRangeDevice> dr;
  for (const auto& r : ranges) dr.push_back({r.offset, r.size, float(r.weight_decay)});
  return dr;
}

// The CUDA kernels' 16-bit format code: 1 bf16, 2 fp16.
int cuda_format(Precision p) {
  TRIDENT_CHECK(p != Precision::fp32, "a 16-bit conversion needs a 16-bit format");
  return p == Precision::bf16 ? 1 : 2;
}

}  // namespace
#endif

// kernels/activation.hpp
KERNEL_OP(void, gelu_forward, (T * out, const T* inp, int64_t n), (out, inp, n), out, cuda::gelu_forward(out, inp, n));
KERNEL_OP(void, gelu_backward, (T * dinp, const T* inp, const T* dout, int64_t n), (dinp, inp, dout, n), dinp,
          cuda::gelu_backward(dinp, inp, dout, n));
KERNEL_OP(void, swiglu_forward, (T * out, const T* inp, int64_t N, int64_t F), (out, inp, N, F), out,
          cuda::swiglu_forward(out, inp, N, F));
KERNEL_OP(void, swiglu_backward, (T * dinp, const T* inp, const T* dout, int64_t N, int64_t F), (dinp, inp, dout, N, F),
          dinp, cuda::swiglu_backward(dinp, inp, dout, N, F));
KERNEL_OP(void, clamped_swiglu_forward, (T * out, const T* inp, int64_t N, int64_t F, double alpha, double limit),
          (out, inp, N, F, alpha, limit), out, cuda::clamped_swiglu_forward(out, inp, N, F, alpha, limit));
KERNEL_OP(void, clamped_swiglu_backward,
          (T * dinp, const T* inp, const T* dout, int64_t N, int64_t F, double alpha, double limit),
          (dinp, inp, dout, N, F, alpha, limit), dinp,
          cuda::clamped_swiglu_backward(dinp, inp, dout, N, F, alpha, limit));

// kernels/adamw.hpp
KERNEL_OP(void, adamw_update, (T * param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& hp),
          (param, m, v, grad, n, hp), param,
          cuda::adamw_update_multi(param, m, v, grad, {{0, n, float(hp.weight_decay)}}, hp.lr, hp.beta1, hp.beta2,
                                   hp.eps, hp.step, hp.grad_scale));
KERNEL_OP(void, adamw_update_multi,
          (T * param, T* m, T* v, const T* grad, const std::vector<AdamWRange>& ranges, const AdamWParams& hp),
          (param, m, v, grad, ranges, hp), param,
          cuda::adamw_update_multi(param, m, v, grad, device_ranges(ranges), hp.lr, hp.beta1, hp.beta2, hp.eps, hp.step,
                                   hp.grad_scale));
KERNEL_OP(void, bias_sign_update, (T * param, const T* count, int64_t n, double rate, double mean),
          (param, count, n, rate, mean), param, cuda::bias_sign_update(param, count, n, rate, mean));

// kernels/attention.hpp
KERNEL_OP(void, attention_lse,
          (T * lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, int64_t Dv,
           const int32_t* doc_start, int64_t window, const T* sinks),
          (lse, qkv, B, T_, H, KV, D, Dv, doc_start, window, sinks), qkv,
          cuda::attention_lse(lse, qkv, B, T_, H, KV, D, Dv, doc_start, window, sinks));
KERNEL_OP(void, attention_forward,
          (T * out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D, int64_t Dv,
           const int32_t* doc_start, int64_t window, const T* sinks),
          (out, lse, qkv, B, T_, H, KV, D, Dv, doc_start, window, sinks), qkv,
          cuda::attention_forward(out, lse, qkv, B, T_, H, KV, D, Dv, doc_start, window, sinks));
KERNEL_OP(void, attention_delta,
          (T * delta, const T* dout, const T* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H, int64_t D),
          (delta, dout, out, ldo, B, Tq, H, D), out, cuda::attention_delta(delta, dout, out, ldo, B, Tq, H, D));
KERNEL_OP(void, attention_backward,
          (T * dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B, int64_t T_, int64_t H,
           int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start, int64_t window, const T* sinks, T* dsinks),
          (dqkv, dout, qkv, out, lse, B, T_, H, KV, D, Dv, doc_start, window, sinks, dsinks), qkv,
          cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T_, H, KV, D, Dv, doc_start, window, sinks, dsinks));
KERNEL_OP(void, attention_sink_forward,
          (T * out, int64_t ldo, T* lse, const T* sinks, int64_t B, int64_t Tq, int64_t H, int64_t Dv),
          (out, ldo, lse, sinks, B, Tq, H, Dv), lse, cuda::attention_sink_forward(out, ldo, lse, sinks, B, Tq, H, Dv));
KERNEL_OP(void, attention_sink_backward,
          (T * dsinks, const T* lse, const T* delta, const T* sinks, int64_t B, int64_t Tq, int64_t H),
          (dsinks, lse, delta, sinks, B, Tq, H), lse,
          cuda::attention_sink_backward(dsinks, lse, delta, sinks, B, Tq, H));
KERNEL_OP(void, attention_block_forward, (T * out, int64_t ldo, T* lse, const AttentionBlock<T>& a, bool merge),
          (out, ldo, lse, a, merge), a.q, ([&] {
            TRIDENT_CHECK(!a.head_max, "attention: the largest logit per head (QK-clip) is the CPU's in this version");
            return cuda::attention_block_forward(out, ldo, lse, a, merge);
          }()));
KERNEL_OP(void, attention_block_backward,
          (T * dq, int64_t lddq, T* dk, T* dv, int64_t lddkv, const T* dout, int64_t lddo, const T* lse, const T* delta,
           const AttentionBlock<T>& a),
          (dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta, a), a.q,
          cuda::attention_block_backward(dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta, a));

// kernels/buffer.hpp
KERNEL_OP(void, fill_zero, (T * x, int64_t n), (x, n), x, cuda::fill_zero(x, n));
KERNEL_OP(double, sum, (const T* x, int64_t n), (x, n), x, cuda::sum(x, n));
KERNEL_OP(double, sum_of_squares_ranges, (const T* x, const std::vector<std::pair<int64_t, int64_t>>& ranges),
          (x, ranges), x, cuda::sum_of_squares_ranges(x, ranges));

// kernels/cross_entropy.hpp
KERNEL_OP(void, softmax_cross_entropy,
          (T * losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid, LossGrad<T> grad),
          (losses, logits, targets, N, V, Vvalid, grad), logits,
          cuda::softmax_cross_entropy(losses, logits, targets, N, V, Vvalid, grad.write, grad.scale));
KERNEL_OP(void, cross_entropy_local_max, (T * row_max, const T* logits, int64_t N, int64_t V, int64_t Vvalid),
          (row_max, logits, N, V, Vvalid), logits, cuda::cross_entropy_local_max(row_max, logits, N, V, Vvalid));
KERNEL_OP(void, cross_entropy_local_sums,
          (T * sums, const T* logits, const T* row_max, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
           int64_t vocab_begin),
          (sums, logits, row_max, targets, N, V, Vvalid, vocab_begin), logits,
          cuda::cross_entropy_local_sums(sums, logits, row_max, targets, N, V, Vvalid, vocab_begin));
KERNEL_OP(void, cross_entropy_finish,
          (T * losses, T* logits, const T* row_max, const T* sums, const int32_t* targets, int64_t N, int64_t V,
           int64_t Vvalid, int64_t vocab_begin, LossGrad<T> grad),
          (losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, grad), logits,
          cuda::cross_entropy_finish(losses, logits, row_max, sums, targets, N, V, Vvalid, vocab_begin, grad.write,
                                     grad.scale));

// kernels/embedding.hpp
KERNEL_OP(void, embedding_forward,
          (T * out, const int32_t* tokens, const T* wte, int64_t N, int64_t C, int64_t vocab_begin, int64_t V),
          (out, tokens, wte, N, C, vocab_begin, V), out,
          cuda::embedding_forward(out, tokens, wte, N, C, vocab_begin, V));
KERNEL_OP(void, embedding_backward,
          (T * dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C, int64_t vocab_begin, int64_t V),
          (dwte, dout, tokens, N, C, vocab_begin, V), dwte,
          cuda::embedding_backward(dwte, dout, tokens, N, C, vocab_begin, V));
KERNEL_OP(void, position_forward,
          (T * out, const T* inp, const T* wpe, int64_t row_begin, int64_t rows, int64_t T_, int64_t C,
           const int32_t* doc_start),
          (out, inp, wpe, row_begin, rows, T_, C, doc_start), out,
          cuda::position_forward(out, inp, wpe, row_begin, rows, T_, C, doc_start));
KERNEL_OP(void, position_backward,
          (T * dwpe, const T* dout, int64_t row_begin, int64_t rows, int64_t T_, int64_t C, const int32_t* doc_start),
          (dwpe, dout, row_begin, rows, T_, C, doc_start), dwpe,
          cuda::position_backward(dwpe, dout, row_begin, rows, T_, C, doc_start));

// kernels/gemm.hpp
KERNEL_OP(void, gemm,
          (bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
           int64_t ldb, T beta, T* C, int64_t ldc, Precision math),
          (trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, math), C,
          cuda::gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_mode(math)));
KERNEL_OP(void, linear_forward,
          (T * out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC, Precision math),
          (out, inp, weight, bias, N, C, OC, math), out,
          cuda::linear_forward(out, inp, weight, bias, N, C, OC, cuda_mode(math)));
KERNEL_OP(void, linear_backward,
          (T * dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N, int64_t C,
           int64_t OC, bool accumulate, Precision math),
          (dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate, math), dout,
          cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate, cuda_mode(math)));

// kernels/norm.hpp
KERNEL_OP(void, layernorm_forward,
          (T * out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C, double eps),
          (out, mean, rstd, inp, weight, bias, N, C, eps), out,
          cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps));
KERNEL_OP(void, layernorm_backward,
          (T * dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean, const T* rstd,
           int64_t N, int64_t C, bool accumulate),
          (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate), dout,
          cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate));
KERNEL_OP(void, rmsnorm_forward, (T * out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, double eps),
          (out, rstd, inp, weight, N, C, eps), out, cuda::rmsnorm_forward(out, rstd, inp, weight, N, C, eps));
KERNEL_OP(void, rmsnorm_backward,
          (T * dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N, int64_t C,
           bool accumulate),
          (dinp, dweight, dout, inp, weight, rstd, N, C, accumulate), dout,
          cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, accumulate));

// kernels/grouped_gemm.hpp (on CUDA one grouped cuBLAS call; the schedule is the CPU's)
KERNEL_OP(void, grouped_linear_forward,
          (T * y, const T* x, const T* w, const int64_t* offsets, int64_t G, int64_t C, int64_t OC, Precision math,
           GroupedSchedule schedule),
          (y, x, w, offsets, G, C, OC, math, schedule), y,
          cuda::grouped_linear_forward(y, x, w, offsets, G, C, OC, cuda_mode(math)));
KERNEL_OP(void, grouped_linear_backward,
          (T * dx, T* dw, const T* dy, const T* x, const T* w, const int64_t* offsets, int64_t G, int64_t C, int64_t OC,
           bool accumulate, Precision math, GroupedSchedule schedule),
          (dx, dw, dy, x, w, offsets, G, C, OC, accumulate, math, schedule), dw,
          cuda::grouped_linear_backward(dx, dw, dy, x, w, offsets, G, C, OC, accumulate, cuda_mode(math)));
KERNEL_OP(void, grouped_bias_forward, (T * y, const T* b, const int64_t* offsets, int64_t G, int64_t OC),
          (y, b, offsets, G, OC), y, cuda::grouped_bias_forward(y, b, offsets, G, OC));
KERNEL_OP(void, grouped_bias_backward,
          (T * db, const T* dy, const int64_t* offsets, int64_t G, int64_t OC, bool accumulate),
          (db, dy, offsets, G, OC, accumulate), db, cuda::grouped_bias_backward(db, dy, offsets, G, OC, accumulate));

// kernels/moe_permute.hpp (the routes are integers: the choice by hand)
namespace cpu {
void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E);
}
void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E) {
#ifdef TRIDENT_HAVE_CUDA
  if (::trident::is_device_pointer(expert)) {
    ::trident::kernels::cuda::KernelTimer trident_timer_(__func__);
    return cuda::moe_route_index(row, token, offsets, expert, N, K, E);
  }
#endif
  cpu::moe_route_index(row, token, offsets, expert, N, K, E);
}
KERNEL_OP(void, moe_permute, (T * x, const T* h, const int32_t* token, int64_t M, int64_t C), (x, h, token, M, C), x,
          cuda::moe_permute(x, h, token, M, C));
KERNEL_OP(void, moe_combine,
          (T * out, const T* y, const T* weight, const int32_t* row, int64_t N, int64_t K, int64_t C),
          (out, y, weight, row, N, K, C), out, cuda::moe_combine(out, y, weight, row, N, K, C));
KERNEL_OP(void, moe_combine_backward,
          (T * dys, T* dweight, const T* dy, const T* y, const T* weight, const int32_t* row, int64_t N, int64_t K,
           int64_t C),
          (dys, dweight, dy, y, weight, row, N, K, C), dys,
          cuda::moe_combine_backward(dys, dweight, dy, y, weight, row, N, K, C));
KERNEL_OP(void, moe_unpermute, (T * dh, const T* dx, const int32_t* row, int64_t N, int64_t K, int64_t C),
          (dh, dx, row, N, K, C), dh, cuda::moe_unpermute(dh, dx, row, N, K, C));

// kernels/precision.hpp
KERNEL_OP(void, round_to_storage, (T * x, int64_t n, Precision p), (x, n, p), x,
          p == Precision::fp32 ? void() : cuda::round_to_storage(x, n, cuda_format(p)));
KERNEL_OP(int64_t, count_nonfinite, (const T* x, int64_t n), (x, n), x, cuda::count_nonfinite(x, n));
KERNEL_OP(void, pack_16, (uint16_t * dst, const T* src, int64_t n, Precision p), (dst, src, n, p), src,
          cuda::pack_16(dst, src, n, cuda_format(p)));
KERNEL_OP(void, store_16, (T * x, uint16_t* dst, int64_t n, Precision p), (x, dst, n, p), x,
          (cuda::round_to_storage(x, n, cuda_format(p)), cuda::pack_16(dst, x, n, cuda_format(p))));
KERNEL_OP(void, unpack_16, (T * dst, const uint16_t* src, int64_t n, Precision p), (dst, src, n, p), dst,
          cuda::unpack_16(dst, src, n, cuda_format(p)));

// kernels/rows.hpp
KERNEL_OP(void, rows_scale_add, (T * out, const T* x, const T* g, int64_t N, int64_t C), (out, x, g, N, C), out,
          cuda::rows_scale_add(out, x, g, N, C));
KERNEL_OP(void, rows_scale, (T * out, const T* x, const T* g, int64_t N, int64_t C), (out, x, g, N, C), out,
          cuda::rows_scale(out, x, g, N, C));
KERNEL_OP(void, rows_dot, (T * d, const T* x, const T* y, int64_t N, int64_t C), (d, x, y, N, C), d,
          cuda::rows_dot(d, x, y, N, C));
KERNEL_OP(void, heads_gather, (T * heads, const T* qkv, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W),
          (heads, qkv, N, H, KV, D, W), heads, cuda::heads_gather(heads, qkv, N, H, KV, D, W));
KERNEL_OP(void, heads_scatter, (T * qkv, const T* heads, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W),
          (qkv, heads, N, H, KV, D, W), qkv, cuda::heads_scatter(qkv, heads, N, H, KV, D, W));
KERNEL_OP(void, mla_heads,
          (T * qkv, const T* q, const T* kvb, const T* kr, int64_t N, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv),
          (qkv, q, kvb, kr, N, H, Dn, Dr, Dv), qkv, cuda::mla_heads(qkv, q, kvb, kr, N, H, Dn, Dr, Dv));
KERNEL_OP(void, mla_heads_backward,
          (T * dq, T* dkvb, T* dkr, const T* dqkv, int64_t N, int64_t H, int64_t Dn, int64_t Dr, int64_t Dv),
          (dq, dkvb, dkr, dqkv, N, H, Dn, Dr, Dv), dqkv,
          cuda::mla_heads_backward(dq, dkvb, dkr, dqkv, N, H, Dn, Dr, Dv));
KERNEL_OP(void, columns_concat, (T * out, const T* a, const T* b, int64_t N, int64_t A, int64_t B),
          (out, a, b, N, A, B), out, cuda::columns_concat(out, a, b, N, A, B));
KERNEL_OP(void, columns_split, (T * a, T* b, const T* in, int64_t N, int64_t A, int64_t B), (a, b, in, N, A, B), in,
          cuda::columns_split(a, b, in, N, A, B));

// kernels/residual.hpp
KERNEL_OP(void, residual_forward, (T * out, const T* a, const T* b, const T* bias, int64_t N, int64_t C),
          (out, a, b, bias, N, C), out, cuda::residual_forward(out, a, b, bias, N, C));
KERNEL_OP(void, bias_backward, (T * dbias, const T* dout, int64_t N, int64_t C, bool accumulate),
          (dbias, dout, N, C, accumulate), dout, cuda::bias_backward(dbias, dout, N, C, accumulate));

// kernels/rotary.hpp
KERNEL_OP(void, rope_pairs_forward,
          (T * x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride, int64_t offset,
           int64_t Dr, const int32_t* doc_start),
          (x, table, B, T_, heads, ld, stride, offset, Dr, doc_start), x,
          cuda::rope_pairs(x, table, B, T_, heads, ld, stride, offset, Dr, 1.0, doc_start));
KERNEL_OP(void, rope_pairs_backward,
          (T * x, const double* table, int64_t B, int64_t T_, int64_t heads, int64_t ld, int64_t stride, int64_t offset,
           int64_t Dr, const int32_t* doc_start),
          (x, table, B, T_, heads, ld, stride, offset, Dr, doc_start), x,
          cuda::rope_pairs(x, table, B, T_, heads, ld, stride, offset, Dr, -1.0, doc_start));
KERNEL_OP(void, rope_forward,
          (T * qkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
           const int32_t* doc_start),
          (qkv, table, B, T_, H, KV, D, doc_start), qkv, cuda::rope_forward(qkv, table, B, T_, H, KV, D, doc_start));
KERNEL_OP(void, rope_backward,
          (T * dqkv, const double* table, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
           const int32_t* doc_start),
          (dqkv, table, B, T_, H, KV, D, doc_start), dqkv,
          cuda::rope_backward(dqkv, table, B, T_, H, KV, D, doc_start));

}  // namespace trident::kernels

// kernels/fp8.hpp: the codes and scalings that run where the tensor lives
// (the blockwise dequantisations, delayed scaling's state and the scalars are host-only)
namespace trident::kernels::fp8 {
namespace cpu {
float amax(const float* x, int64_t n);
void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q);
void dequantize(Format f, const uint8_t* q, int64_t n, float scale, float* y);
void fake_quantize(Format f, const float* x, int64_t n, float scale, float* y);
void quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales);
void quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales);
void fake_quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y);
void fake_quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y);
void quantize_tiled(const float* x, int64_t rows, int64_t cols, Tile t, bool power_of_two, uint8_t* q, float* y,
                    float* scales);
int64_t count_saturated(Format f, const float* x, int64_t n, float scale);
void linear_forward8(float* out, Operand8 x, Operand8 w, const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_dgrad8(float* dinp, Operand8 dout, Operand8 w, int64_t N, int64_t C, int64_t OC);
void linear_wgrad8(float* dweight, Operand8 dout, Operand8 x, int64_t N, int64_t C, int64_t OC, bool accumulate);
void grouped_linear_forward8(float* y, const uint8_t* x, Format fx, const float* x_scales, const uint8_t* w, Format fw,
                             const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC);
void dequantize_tiled(const uint8_t* q, int64_t rows, int64_t cols, Tile t, const float* factors, float* y);
void linear_forward8b(float* out, Tiled8 x, Tiled8 w, const float* bias, int64_t N, int64_t C, int64_t OC);
void linear_dgrad8b(float* dinp, Tiled8 dout, Tiled8 w, int64_t N, int64_t C, int64_t OC);
void linear_wgrad8b(float* dweight, Tiled8 dout, Tiled8 x, int64_t N, int64_t C, int64_t OC, bool accumulate);
}  // namespace cpu
namespace {
[[maybe_unused]] int code(Format f) { return f == Format::e4m3 ? 0 : 1; }
}  // namespace

float amax(const float* x, int64_t n) { CHOOSE(float, x, cuda::fp8_amax(x, n), cpu::amax(x, n)); }
void quantize(Format f, const float* x, int64_t n, float scale, uint8_t* q) {
  CHOOSE(float, x, cuda::fp8_quantize(q, x, n, scale, code(f)), cpu::quantize(f, x, n, scale, q));
}
void dequantize(Format f, const uint8_t* q, int64_t n, float scale, float* y) {
  CHOOSE(float, y, cuda::fp8_dequantize(y, q, n, scale, code(f)), cpu::dequantize(f, q, n, scale, y));
}
void fake_quantize(Format f, const float* x, int64_t n, float scale, float* y) {
  CHOOSE(float, x, cuda::fp8_fake_quantize(y, x, n, scale, code(f)), cpu::fake_quantize(f, x, n, scale, y));
}
void quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  CHOOSE(float, x, cuda::fp8_quantize_tiled(q, nullptr, scales, x, rows, cols, 1, kBlock, power_of_two),
         cpu::quantize_tiles(x, rows, cols, power_of_two, q, scales));
}
void quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, uint8_t* q, float* scales) {
  CHOOSE(float, x, cuda::fp8_quantize_tiled(q, nullptr, scales, x, rows, cols, kBlock, kBlock, power_of_two),
         cpu::quantize_blocks(x, rows, cols, power_of_two, q, scales));
}
void fake_quantize_tiles(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  CHOOSE(float, x, cuda::fp8_quantize_tiled(nullptr, y, nullptr, x, rows, cols, 1, kBlock, power_of_two),
         cpu::fake_quantize_tiles(x, rows, cols, power_of_two, y));
}
void fake_quantize_blocks(const float* x, int64_t rows, int64_t cols, bool power_of_two, float* y) {
  CHOOSE(float, x, cuda::fp8_quantize_tiled(nullptr, y, nullptr, x, rows, cols, kBlock, kBlock, power_of_two),
         cpu::fake_quantize_blocks(x, rows, cols, power_of_two, y));
}
void quantize_tiled(const float* x, int64_t rows, int64_t cols, Tile t, bool power_of_two, uint8_t* q, float* y,
                    float* scales) {
  CHOOSE(float, x, cuda::fp8_quantize_tiled(q, y, scales, x, rows, cols, t.rows, t.cols, power_of_two),
         cpu::quantize_tiled(x, rows, cols, t, power_of_two, q, y, scales));
}
int64_t count_saturated(Format f, const float* x, int64_t n, float scale) {
  CHOOSE(float, x, cuda::fp8_count_saturated(x, n, scale, code(f)), cpu::count_saturated(f, x, n, scale));
}

void linear_forward8(float* out, Operand8 x, Operand8 w, const float* bias, int64_t N, int64_t C, int64_t OC) {
  CHOOSE(float, out,
         cuda::fp8_linear_forward(out, x.q, code(x.format), x.scale, w.q, code(w.format), w.scale, bias, N, C, OC),
         cpu::linear_forward8(out, x, w, bias, N, C, OC));
}
void linear_dgrad8(float* dinp, Operand8 dout, Operand8 w, int64_t N, int64_t C, int64_t OC) {
  CHOOSE(float, dinp,
         cuda::fp8_linear_dgrad(dinp, dout.q, code(dout.format), dout.scale, w.q, code(w.format), w.scale, N, C, OC),
         cpu::linear_dgrad8(dinp, dout, w, N, C, OC));
}
void linear_wgrad8(float* dweight, Operand8 dout, Operand8 x, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  CHOOSE(float, dweight,
         cuda::fp8_linear_wgrad(dweight, dout.q, code(dout.format), dout.scale, x.q, code(x.format), x.scale, N, C, OC,
                                accumulate),
         cpu::linear_wgrad8(dweight, dout, x, N, C, OC, accumulate));
}
void dequantize_tiled(const uint8_t* q, int64_t rows, int64_t cols, Tile t, const float* factors, float* y) {
  CHOOSE(float, y, cuda::fp8_dequantize_tiled(y, q, factors, rows, cols, t.rows, t.cols),
         cpu::dequantize_tiled(q, rows, cols, t, factors, y));
}
void linear_forward8b(float* out, Tiled8 x, Tiled8 w, const float* bias, int64_t N, int64_t C, int64_t OC) {
  CHOOSE(float, out, cuda::fp8_linear_forward_blocks(out, x.q, x.factors, w.q, w.factors, bias, N, C, OC),
         cpu::linear_forward8b(out, x, w, bias, N, C, OC));
}
void linear_dgrad8b(float* dinp, Tiled8 dout, Tiled8 w, int64_t N, int64_t C, int64_t OC) {
  CHOOSE(float, dinp, cuda::fp8_linear_dgrad_blocks(dinp, dout.q, dout.factors, w.q, w.factors, N, C, OC),
         cpu::linear_dgrad8b(dinp, dout, w, N, C, OC));
}
void linear_wgrad8b(float* dweight, Tiled8 dout, Tiled8 x, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  CHOOSE(float, dweight,
         cuda::fp8_linear_wgrad_blocks(dweight, dout.q, dout.factors, x.q, x.factors, N, C, OC, accumulate),
         cpu::linear_wgrad8b(dweight, dout, x, N, C, OC, accumulate));
}
void grouped_linear_forward8(float* y, const uint8_t* x, Format fx, const float* x_scales, const uint8_t* w, Format fw,
                             const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC) {
  CHOOSE(float, y, cuda::fp8_grouped_linear_forward(y, x, code(fx), x_scales, w, code(fw), w_scales, offsets, G, C, OC),
         cpu::grouped_linear_forward8(y, x, fx, x_scales, w, fw, w_scales, offsets, G, C, OC));
}
}  // namespace trident::kernels::fp8
