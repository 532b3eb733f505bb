// The CUDA twins of the CPU kernels: float buffers in device memory, work
// queued on the rank's compute stream (core/device_memory.hpp). The public
// entry points (kernels/*.hpp) come here from kernels/device_choice.cpp when their
// buffers are device memory; tests call these directly against the CPU versions. No CUDA
// headers, so C++ files may include it; in a build without CUDA none of
// these exist and nothing calls them.
// Shapes and accumulate/overwrite rules are those of the public headers.
// Left out on purpose: fp16/bf16-typed buffers (16-bit values live in fp32
// buffers, rounded at every store, see docs/precision.md); tensor-core
// (WMMA) attention — the flash-style kernels use fp32 FMA.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.hpp"

namespace trident::kernels::cuda {

// GEMM math, the caller's (kernels/gemm.hpp's math, as `mode`): 0 fp32
// (exact), 1 bf16 tensor cores, 2 fp16 tensor cores; the 16-bit modes
// convert the fp32 operands (exactly, when they hold 16-bit values) and
// accumulate in fp32 (cuBLASLt compute type 32F_FAST_16BF/16F).
//
// Row-major, as kernels/gemm.hpp.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int mode);
// Column-major cuBLASLt call: C[m,n] = alpha op(A) op(B) + beta C (+ bias[m]
// per row, fused as the BIAS epilogue when bias is not null).
void matmul_cublaslt(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias,
                     int mode);
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, int mode);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, bool accumulate, int mode);

// As kernels/grouped_gemm.hpp: host offsets, device operands; one
// cublasGemmGroupedBatchedEx call per direction (a group per expert with
// rows, in the mode's compute type).
void grouped_linear_forward(float* y, const float* x, const float* w, const int64_t* offsets, int64_t G, int64_t C,
                            int64_t OC, int mode);
void grouped_linear_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                             const int64_t* offsets, int64_t G, int64_t C, int64_t OC, bool accumulate, int mode);
void grouped_bias_forward(float* y, const float* b, const int64_t* offsets, int64_t G, int64_t OC);
void grouped_bias_backward(float* db, const float* dy, const int64_t* offsets, int64_t G, int64_t OC, bool accumulate);

// As kernels/fp8.hpp (format 0 e4m3, 1 e5m2): max |x| (NaN kept; copied to
// the host, the stream synchronised); tensorwise quantisation with a given
// scale, the codes (and back) or the fake-quantised values; blockwise 1 x 128 tiles
// (square: 128 x 128 blocks), e4m3, scales = amax / 448 (pow2: the power of
// two at or above). Bit for bit the CPU code's.
float fp8_amax(const float* x, int64_t n);
void fp8_quantize(uint8_t* q, const float* x, int64_t n, float scale, int format);
void fp8_dequantize(float* y, const uint8_t* q, int64_t n, float scale, int format);
void fp8_fake_quantize(float* y, const float* x, int64_t n, float scale, int format);
void fp8_quantize_tiled(uint8_t* q, float* y, float* scales, const float* x, int64_t rows, int64_t cols, int64_t tr,
                        int64_t tc, bool pow2);
int64_t fp8_count_saturated(const float* x, int64_t n, float scale, int format);
// The linear layers' FP8 GEMMs (kernels/fp8.hpp's linear_forward8 and so on;
// gemm_fp8_cuda.cu): codes q with format f (0 e4m3, 1 e5m2) and scale s each.
void fp8_linear_forward(float* out, const uint8_t* x, int fx, float sx, const uint8_t* w, int fw, float sw,
                        const float* bias, int64_t N, int64_t C, int64_t OC);
void fp8_linear_dgrad(float* dinp, const uint8_t* dy, int fg, float sg, const uint8_t* w, int fw, float sw, int64_t N,
                      int64_t C, int64_t OC);
void fp8_linear_wgrad(float* dw, const uint8_t* dy, int fg, float sg, const uint8_t* x, int fx, float sx, int64_t N,
                      int64_t C, int64_t OC, bool accumulate);
// blockwise (kernels/fp8.hpp's linear_forward8b and so on): e4m3 codes, a
// factor per tile in quantize_tiled's layout; the tiles' decoded values
void fp8_linear_forward_blocks(float* out, const uint8_t* x, const float* fx, const uint8_t* w, const float* fw,
                               const float* bias, int64_t N, int64_t C, int64_t OC);
void fp8_linear_dgrad_blocks(float* dinp, const uint8_t* dy, const float* fg, const uint8_t* w, const float* fw,
                             int64_t N, int64_t C, int64_t OC);
void fp8_linear_wgrad_blocks(float* dw, const uint8_t* dy, const float* fg, const uint8_t* x, const float* fx,
                             int64_t N, int64_t C, int64_t OC, bool accumulate);
void fp8_dequantize_tiled(float* y, const uint8_t* q, const float* factors, int64_t rows, int64_t cols, int64_t tr,
                          int64_t tc);
// group by group (offsets and scales in host memory)
void fp8_grouped_linear_forward(float* y, const uint8_t* x, int fx, const float* x_scales, const uint8_t* w, int fw,
                                const float* w_scales, const int64_t* offsets, int64_t G, int64_t C, int64_t OC);

// As kernels/rows.hpp.
void rows_scale_add(float* out, const float* x, const float* g, int64_t N, int64_t C);
void rows_scale(float* out, const float* x, const float* g, int64_t N, int64_t C);
void rows_dot(float* d, const float* x, const float* y, int64_t N, int64_t C);
void heads_gather(float* heads, const float* qkv, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W);
void heads_scatter(float* qkv, const float* heads, int64_t N, int64_t H, int64_t KV, int64_t D, int64_t W);
void mla_heads(float* qkv, const float* q, const float* kvb, const float* kr, int64_t N, int64_t H, int64_t Dn,
               int64_t Dr, int64_t Dv);
void mla_heads_backward(float* dq, float* dkvb, float* dkr, const float* dqkv, int64_t N, int64_t H, int64_t Dn,
                        int64_t Dr, int64_t Dv);
void columns_concat(float* out, const float* a, const float* b, int64_t N, int64_t A, int64_t B);
void columns_split(float* a, float* b, const float* in, int64_t N, int64_t A, int64_t B);

// As kernels/moe_permute.hpp (offsets: host memory).
void moe_route_index(int32_t* row, int32_t* token, int64_t* offsets, const int32_t* expert, int64_t N, int64_t K,
                     int64_t E);
void moe_permute(float* x, const float* h, const int32_t* token, int64_t M, int64_t C);
void moe_combine(float* out, const float* y, const float* weight, const int32_t* row, int64_t N, int64_t K, int64_t C);
void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* y, const float* weight,
                          const int32_t* row, int64_t N, int64_t K, int64_t C);
void moe_unpermute(float* dh, const float* dx, const int32_t* row, int64_t N, int64_t K, int64_t C);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, double eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, double eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate);

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);
void clamped_swiglu_forward(float* out, const float* inp, int64_t N, int64_t F, double alpha, double limit);
void clamped_swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F, double alpha,
                             double limit);

// Flash-style causal attention: lse[B,H,T] (log-sum-exp of each query row's
// scaled scores) is the only per-row state kept, as on the CPU; no T x T matrix exists.
// Query/key heads of D and value heads of Dv, each up to 256. doc_start[B*T]
// (device, optional): document masking; window > 0: sliding-window attention.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       int64_t Dv, const int32_t* doc_start = nullptr, int64_t window = 0,
                       const float* sinks = nullptr);
void attention_lse(float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv,
                   const int32_t* doc_start = nullptr, int64_t window = 0, const float* sinks = nullptr);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                        int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv, const int32_t* doc_start = nullptr,
                        int64_t window = 0, const float* sinks = nullptr, float* dsinks = nullptr);
// Attention sinks (kernels/attention.hpp): sinks and dsinks on the device too.
void attention_sink_forward(float* out, int64_t ldo, float* lse, const float* sinks, int64_t B, int64_t Tq, int64_t H,
                            int64_t Dv);
void attention_sink_backward(float* dsinks, const float* lse, const float* delta, const float* sinks, int64_t B,
                             int64_t Tq, int64_t H);
// Blocks with global positions and log-sum-exp merging (context parallelism),
// the twins of kernels/attention.hpp's CPU functions; every pointer on the device.
void attention_block_forward(float* out, int64_t ldo, float* lse, const AttentionBlock<float>& a, bool merge);
void attention_delta(float* delta, const float* dout, const float* out, int64_t ldo, int64_t B, int64_t Tq, int64_t H,
                     int64_t D);
void attention_block_backward(float* dq, int64_t lddq, float* dk, float* dv, int64_t lddkv, const float* dout,
                              int64_t lddo, const float* lse, const float* delta, const AttentionBlock<float>& a);

// table: the host table of kernels::rope_table (copied to the device once per table)
void rope_forward(float* qkv, const double* table, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                  const int32_t* doc_start = nullptr);
void rope_backward(float* dqkv, const double* table, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                   const int32_t* doc_start = nullptr);
void rope_pairs(float* x, const double* table, int64_t B, int64_t T, int64_t heads, int64_t ld, int64_t stride,
                int64_t offset, int64_t Dr, double sign, const int32_t* doc_start);

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N, int64_t C, int64_t vocab_begin,
                       int64_t V);
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N, int64_t C,
                        int64_t vocab_begin, int64_t V);
void position_forward(float* out, const float* inp, const float* wpe, int64_t row_begin, int64_t rows, int64_t T,
                      int64_t C, const int32_t* doc_start = nullptr);
void position_backward(float* dwpe, const float* dout, int64_t row_begin, int64_t rows, int64_t T, int64_t C,
                       const int32_t* doc_start = nullptr);

// write_grad: overwrite the logits with dscale * (softmax - onehot) (kernels/cross_entropy.hpp's LossGrad)
void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vvalid,
                           bool write_grad, float dscale);
void cross_entropy_local_max(float* row_max, const float* logits, int64_t N, int64_t V, int64_t Vvalid);
void cross_entropy_local_sums(float* sums, const float* logits, const float* row_max, const int32_t* targets, int64_t N,
                              int64_t V, int64_t Vvalid, int64_t vocab_begin);
void cross_entropy_finish(float* losses, float* logits, const float* row_max, const float* sums, const int32_t* targets,
                          int64_t N, int64_t V, int64_t Vvalid, int64_t vocab_begin, bool write_grad, float dscale);

void residual_forward(float* out, const float* a, const float* b, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C, bool accumulate);

// Multi-tensor AdamW: every range of the flat buffer in one launch.
struct AdamWRangeDevice {
  int64_t offset, size;
  float weight_decay;
};
void adamw_update_multi(float* param, float* m, float* v, const float* grad,
                        const std::vector<AdamWRangeDevice>& ranges, double lr, double beta1, double beta2, double eps,
                        int64_t step, double grad_scale);
void bias_sign_update(float* param, const float* count, int64_t n, double rate, double mean);

void round_to_storage(float* x, int64_t n, int mode);  // 1 bf16, 2 fp16
void pack_16(uint16_t* dst, const float* src, int64_t n, int mode);
void unpack_16(float* dst, const uint16_t* src, int64_t n, int mode);
int64_t count_nonfinite(const float* x, int64_t n);
void fill_zero(float* x, int64_t n);
// In a fixed order (bitwise reproducible): per-chunk double partials summed on the host.
double sum(const float* x, int64_t n);
double sum_of_squares_ranges(const float* g, const std::vector<std::pair<int64_t, int64_t>>& ranges);

// GPU time per kernel (TRIDENT_KERNEL_TIMES=1, or set_kernel_timing): each
// dispatched call is bracketed by CUDA events on the compute stream;
// take_kernel_times() waits for them and returns seconds per kernel name
// since the last call. Off: a KernelTimer costs one branch.
class KernelTimer {
 public:
  explicit KernelTimer(const char* name);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  const char* name_;
  void* start_ = nullptr;
};
bool kernel_timing_enabled();
void set_kernel_timing(bool on);
std::vector<std::pair<std::string, double>> take_kernel_times();

std::string device_summary();
// Dense peak of the bound device, FLOP/s: mode 0 fp32 (CUDA cores), 1/2 bf16/fp16 tensor cores.
double dense_peak_flops(int mode);

}  // namespace trident::kernels::cuda
