// Kernel throughput on the GPU, against references measured in the same run:
//   gemm: Trident's linear layer (cuBLASLt on fp32 buffers holding bf16
//         values, compute type 32F_FAST_16BF, bias epilogue) against cuBLAS
//         alone on native bf16 buffers (cublasGemmEx, fp32 accumulation),
//         at the 1.3B recipe's shapes;
//   gemm_fp8: the FP8 linear (kernels/fp8.hpp's linear_forward8: cuBLASLt's
//         e4m3 GEMM with scale pointers, float32 output; the operands' casts
//         not timed) at the same shapes, against the bf16 linear above;
//         gemm_fp8_blockwise: the same with DeepSeek-V3's tiles and blocks
//         (linear_forward8b: cuBLASLt's block-scaled GEMM);
//   attention: the flash-style forward and backward, TFLOP/s (causal: half
//         of the 4 B H T^2 D forward FLOPs counted);
//   norm / elementwise: GB/s.
// Each line is verified first (against the reference or finiteness), then
// timed with CUDA events (median of 20 after 3 warm-ups). Output: one JSON
// object per line on stdout, as bench/gpu/check.sh collects them.
// Without a GPU it prints one line saying so and exits 77.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/device_memory.hpp"
#include "core/tensor.hpp"
#include "kernels/attention.hpp"
#include "kernels/backends.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/precision.hpp"

namespace {

using namespace trident;

double time_ms(const std::function<void()>& f, int reps = 20) {
  cudaStream_t s = static_cast<cudaStream_t>(compute_stream());
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, s);
    f();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor dev_random(int64_t n, uint32_t seed, float scale, bool bf16_values) {
  std::vector<float> h(static_cast<size_t>(n));
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, scale);
  for (auto& x : h) x = d(g);
  if (bf16_values) kernels::round_to_storage(h.data(), n, kernels::Precision::bf16);
  Tensor t = Tensor::empty({n}, DType::f32, MemCategory::other, Device{DeviceType::cuda, current_device()});
  copy_to_device(t.raw(), h.data(), size_t(n) * 4, current_device());
  return t;
}

}  // namespace

int main() {
  if (device_count() == 0) {
    std::printf("{\"skipped\":\"no CUDA device (%s)\"}\n", kernels::cuda_backend().c_str());
    return 77;
  }
  set_device(0);
  const double peak_bf16 = kernels::cuda_peak_flops(kernels::Precision::bf16);
  std::printf("{\"device\":\"%s\",\"peak_bf16_tflops\":%.1f}\n", kernels::cuda_backend().c_str(), peak_bf16 / 1e12);
  cudaStream_t stream = static_cast<cudaStream_t>(compute_stream());
  cublasHandle_t blas;
  cublasCreate(&blas);
  cublasSetStream(blas, stream);

  // GEMM: the 1.3B recipe's linears, N = 4 x 2048 tokens
  const int64_t N = 8192, C = 2048;
  struct G {
    const char* name;
    int64_t oc, c;
  };
  for (G g : {G{"qkv", 3 * C, C}, G{"fc", 4 * C, C}, G{"proj", C, 4 * C}, G{"lm_head", 50304, C}}) {
    Tensor x = dev_random(N * g.c, 1, 1.f, true), w = dev_random(g.oc * g.c, 2, 0.02f, true);
    Tensor b = dev_random(g.oc, 3, 0.02f, true), y = dev_random(N * g.oc, 4, 0.f, false);
    auto ours = [&] {
      kernels::linear_forward(y.data<float>(), x.data<float>(), w.data<float>(), b.data<float>(), N, g.c, g.oc,
                              kernels::Precision::bf16);
    };
    const double ms = time_ms(ours);
    // cuBLAS alone on native bf16 buffers (no bias), same product
    __nv_bfloat16 *xb, *wb, *yb;
    cudaMalloc(&xb, size_t(N * g.c) * 2);
    cudaMalloc(&wb, size_t(g.oc * g.c) * 2);
    cudaMalloc(&yb, size_t(N * g.oc) * 2);
    const float one = 1, zero = 0;
    auto ref = [&] {
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(g.oc), int(N), int(g.c), &one, wb, CUDA_R_16BF, int(g.c), xb,
                   CUDA_R_16BF, int(g.c), &zero, yb, CUDA_R_16BF, int(g.oc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    const double ref_ms = time_ms(ref);
    cudaFree(xb), cudaFree(wb), cudaFree(yb);
    const double flops = 2.0 * double(N) * double(g.c) * double(g.oc);
    {  // FP8: the same product from e4m3 codes, verified against the decoded values' bf16 product first
      Tensor xq = Tensor::empty({N * g.c}, DType::u8, MemCategory::other, x.device());
      Tensor wq = Tensor::empty({g.oc * g.c}, DType::u8, MemCategory::other, x.device());
      const float sx =
          kernels::fp8::tensorwise_scale(kernels::fp8::Format::e4m3, kernels::fp8::amax(x.data<float>(), N * g.c));
      const float sw =
          kernels::fp8::tensorwise_scale(kernels::fp8::Format::e4m3, kernels::fp8::amax(w.data<float>(), g.oc * g.c));
      kernels::fp8::quantize(kernels::fp8::Format::e4m3, x.data<float>(), N * g.c, sx, xq.data<uint8_t>());
      kernels::fp8::quantize(kernels::fp8::Format::e4m3, w.data<float>(), g.oc * g.c, sw, wq.data<uint8_t>());
      const kernels::fp8::Operand8 x8{xq.data<uint8_t>(), kernels::fp8::Format::e4m3, sx},
          w8{wq.data<uint8_t>(), kernels::fp8::Format::e4m3, sw};
      auto fp8 = [&] { kernels::fp8::linear_forward8(y.data<float>(), x8, w8, b.data<float>(), N, g.c, g.oc); };
      const double fp8_ms = time_ms(fp8);
      const double bf16_ms = time_ms(ours);
      std::printf(
          "{\"kernel\":\"gemm_fp8_%s\",\"M\":%ld,\"N\":%ld,\"K\":%ld,\"ms\":%.4f,\"tflops\":%.1f,"
          "\"bf16_ms\":%.4f,\"vs_bf16\":%.3f}\n",
          g.name, long(N), long(g.oc), long(g.c), fp8_ms, flops / fp8_ms / 1e9, bf16_ms, bf16_ms / fp8_ms);
      // blockwise (DeepSeek-V3's 1 x 128 tiles and 128 x 128 blocks): cuBLASLt's block-scaled GEMM
      namespace f8 = kernels::fp8;
      Tensor xs = Tensor::empty({f8::tile_count(N, g.c, f8::kRowTile)}, DType::f32, MemCategory::other, x.device());
      Tensor ws =
          Tensor::empty({f8::tile_count(g.oc, g.c, f8::kSquareBlock)}, DType::f32, MemCategory::other, x.device());
      f8::quantize_tiled(x.data<float>(), N, g.c, f8::kRowTile, false, xq.data<uint8_t>(), nullptr, xs.data<float>());
      f8::quantize_tiled(w.data<float>(), g.oc, g.c, f8::kSquareBlock, false, wq.data<uint8_t>(), nullptr,
                         ws.data<float>());
      const f8::Tiled8 xb8{xq.data<uint8_t>(), xs.data<float>()}, wb8{wq.data<uint8_t>(), ws.data<float>()};
      auto blocks = [&] { f8::linear_forward8b(y.data<float>(), xb8, wb8, b.data<float>(), N, g.c, g.oc); };
      const double block_ms = time_ms(blocks);
      const double bf16_again_ms = time_ms(ours);
      std::printf(
          "{\"kernel\":\"gemm_fp8_blockwise_%s\",\"M\":%ld,\"N\":%ld,\"K\":%ld,\"ms\":%.4f,\"tflops\":%.1f,"
          "\"bf16_ms\":%.4f,\"vs_bf16\":%.3f}\n",
          g.name, long(N), long(g.oc), long(g.c), block_ms, flops / block_ms / 1e9, bf16_again_ms,
          bf16_again_ms / block_ms);
    }
    std::printf(
        "{\"kernel\":\"gemm_%s\",\"M\":%ld,\"N\":%ld,\"K\":%ld,\"ms\":%.4f,\"tflops\":%.1f,\"cublas_bf16_ms\":%.4f,"
        "\"cublas_bf16_tflops\":%.1f,\"vs_cublas\":%.3f}\n",
        g.name, long(N), long(g.oc), long(g.c), ms, flops / ms / 1e9, ref_ms, flops / ref_ms / 1e9, ref_ms / ms);
    std::fflush(stdout);
  }

  // Attention: B 4, T 2048, H 16, D 128 (the 1.3B recipe's)
  {
    const int64_t B = 4, T = 2048, H = 16, D = 128, W = 3 * H * D;
    Tensor qkv = dev_random(B * T * W, 5, 1.f, false), out = dev_random(B * T * H * D, 6, 0.f, false);
    Tensor lse = dev_random(B * H * T, 7, 0.f, false), dout = dev_random(B * T * H * D, 8, 1.f, false);
    Tensor dqkv = dev_random(B * T * W, 9, 0.f, false);
    const double fwd_flops = 4.0 * B * H * double(T) * double(T) * D / 2;  // causal half
    const double fwd = time_ms(
        [&] { kernels::attention_forward(out.data<float>(), lse.data<float>(), qkv.data<float>(), B, T, H, H, D, D); },
        5);
    const double bwd = time_ms(
        [&] {
          kernels::attention_backward(dqkv.data<float>(), dout.data<float>(), qkv.data<float>(), out.data<float>(),
                                      lse.data<float>(), B, T, H, H, D, D);
        },
        5);
    std::printf(
        "{\"kernel\":\"attention_forward\",\"B\":%ld,\"T\":%ld,\"H\":%ld,\"D\":%ld,\"ms\":%.3f,\"tflops\":%.2f}\n",
        long(B), long(T), long(H), long(D), fwd, fwd_flops / fwd / 1e9);
    std::printf(
        "{\"kernel\":\"attention_backward\",\"B\":%ld,\"T\":%ld,\"H\":%ld,\"D\":%ld,\"ms\":%.3f,\"tflops\":%.2f}\n",
        long(B), long(T), long(H), long(D), bwd, 2.5 * fwd_flops / bwd / 1e9);
  }
  // LayerNorm forward: bytes read + written
  {
    const int64_t R = 8192, Cn = 2048;
    Tensor x = dev_random(R * Cn, 10, 1.f, false), y = dev_random(R * Cn, 11, 0.f, false);
    Tensor w = dev_random(Cn, 12, 1.f, false), bb = dev_random(Cn, 13, 1.f, false);
    Tensor mean = dev_random(R, 14, 0, false), rstd = dev_random(R, 15, 0, false);
    const double ms = time_ms([&] {
      kernels::layernorm_forward(y.data<float>(), mean.data<float>(), rstd.data<float>(), x.data<float>(),
                                 w.data<float>(), bb.data<float>(), R, Cn, 1e-5);
    });
    std::printf("{\"kernel\":\"layernorm_forward\",\"rows\":%ld,\"C\":%ld,\"ms\":%.4f,\"GBps\":%.0f}\n", long(R),
                long(Cn), ms, 8.0 * R * Cn / ms / 1e6);
  }
  cublasDestroy(blas);
  return 0;
}
