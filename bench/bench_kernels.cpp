// Forward and backward of every CPU kernel at the GPT-2 124M shape, micro-batch
// 4 x sequence 64 (N = 256 tokens, C = 768, H = 12, V = 50257), 2 threads.
// Counters: GB/s of the tensors read and written (memory-bound kernels) or
// GFLOP/s (attention).
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/rotary.hpp"

namespace trident::bench {
namespace k = trident::kernels;

constexpr int64_t B = 4, T = 64, N = B * T, C = 768, H = 12, D = 64, F = 3072, V = 50257;

std::vector<float> filled(int64_t n, float v = 0.01f) {
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = v * float(int(i % 13) - 6);
  return x;
}
// N token ids spread over the vocabulary.
std::vector<int32_t> token_ids(int64_t stride) {
  std::vector<int32_t> tok(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tok[size_t(i)] = int32_t((i * stride) % V);
  return tok;
}
void bytes(benchmark::State& st, double n) {
  st.counters["GB/s"] = benchmark::Counter(n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

static void BM_layernorm_forward(benchmark::State& st) {
  auto x = filled(N * C), w = filled(C, 1.f), b = filled(C), y = filled(N * C), m = filled(N), r = filled(N);
  for (auto _ : st) k::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  bytes(st, 2.0 * N * C * 4);
}
static void BM_layernorm_backward(benchmark::State& st) {
  auto x = filled(N * C), w = filled(C, 1.f), b = filled(C), y = filled(N * C), m = filled(N), r = filled(N);
  auto dx = filled(N * C), dw = filled(C), db = filled(C), dy = filled(N * C);
  k::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  for (auto _ : st)
    k::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  bytes(st, 4.0 * N * C * 4);
}
static void BM_rmsnorm_forward(benchmark::State& st) {
  auto x = filled(N * C), w = filled(C, 1.f), y = filled(N * C), r = filled(N);
  for (auto _ : st) k::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5);
  bytes(st, 2.0 * N * C * 4);
}
static void BM_rmsnorm_backward(benchmark::State& st) {
  auto x = filled(N * C), w = filled(C, 1.f), y = filled(N * C), r = filled(N), dx = filled(N * C), dw = filled(C);
  k::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5);
  for (auto _ : st) k::rmsnorm_backward(dx.data(), dw.data(), y.data(), x.data(), w.data(), r.data(), N, C);
  bytes(st, 4.0 * N * C * 4);
}
static void BM_gelu_forward(benchmark::State& st) {
  auto x = filled(N * F), y = filled(N * F);
  for (auto _ : st) k::gelu_forward(y.data(), x.data(), N * F);
  bytes(st, 2.0 * N * F * 4);
}
static void BM_gelu_backward(benchmark::State& st) {
  auto x = filled(N * F), dy = filled(N * F), dx = filled(N * F);
  for (auto _ : st) k::gelu_backward(dx.data(), x.data(), dy.data(), N * F);
  bytes(st, 3.0 * N * F * 4);
}
static void BM_swiglu_forward(benchmark::State& st) {
  auto x = filled(N * 2 * F), y = filled(N * F);
  for (auto _ : st) k::swiglu_forward(y.data(), x.data(), N, F);
  bytes(st, 3.0 * N * F * 4);
}
static void BM_swiglu_backward(benchmark::State& st) {
  auto x = filled(N * 2 * F), dy = filled(N * F), dx = filled(N * 2 * F);
  for (auto _ : st) k::swiglu_backward(dx.data(), x.data(), dy.data(), N, F);
  bytes(st, 5.0 * N * F * 4);
}
static void BM_attention_forward(benchmark::State& st) {
  auto qkv = filled(N * 3 * C), out = filled(N * C), p = filled(B * H * T);
  for (auto _ : st) k::attention_forward(out.data(), p.data(), qkv.data(), B, T, H, H, D, D);
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 2 * B * H * T * T * D / 2 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
static void BM_attention_backward(benchmark::State& st) {
  auto qkv = filled(N * 3 * C), out = filled(N * C), p = filled(B * H * T), dqkv = filled(N * 3 * C);
  auto dout = filled(N * C);
  k::attention_forward(out.data(), p.data(), qkv.data(), B, T, H, H, D, D);
  for (auto _ : st) k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), p.data(), B, T, H, H, D, D);
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 4 * B * H * T * T * D / 2 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
// One long sequence (the CPU attention is tiled: memory linear in T)
static void attention_long(benchmark::State& st, bool backward) {
  const int64_t Tl = st.range(0), Hl = 4, Dl = 64, Nl = Tl, Cl = Hl * Dl;
  auto qkv = filled(Nl * 3 * Cl), out = filled(Nl * Cl), p = filled(Hl * Tl), dqkv = filled(Nl * 3 * Cl);
  auto dout = filled(Nl * Cl);
  k::attention_forward(out.data(), p.data(), qkv.data(), 1, Tl, Hl, Hl, Dl, Dl);
  for (auto _ : st) {
    if (backward)
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), p.data(), 1, Tl, Hl, Hl, Dl, Dl);
    else
      k::attention_forward(out.data(), p.data(), qkv.data(), 1, Tl, Hl, Hl, Dl, Dl);
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * (backward ? 4 : 2) * Hl * Tl * Tl * Dl / 2 / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
static void BM_attention_long_forward(benchmark::State& st) { attention_long(st, false); }
static void BM_attention_long_backward(benchmark::State& st) { attention_long(st, true); }
// Multi-head latent attention's shape (DeepSeek-V3's heads: queries and keys
// of 192, values of 128; 4 heads, 1024 tokens): a forward and backward
// with the value heads at their own size (range 128) against the same
// heads padded to 192, what the kernels needed when they took one head
// size. The ratio is the padding's cost; the useful FLOPs are the same.
static void BM_attention_mla(benchmark::State& st) {
  const int64_t Tl = 1024, Hl = 4, Dq = 192, Dv = st.range(0), W = k::attention_qkv_width(Hl, Hl, Dq, Dv);
  auto qkv = filled(Tl * W), out = filled(Tl * Hl * Dv), p = filled(Hl * Tl), dqkv = filled(Tl * W);
  auto dout = filled(Tl * Hl * Dv);
  for (auto _ : st) {
    k::attention_forward(out.data(), p.data(), qkv.data(), 1, Tl, Hl, Hl, Dq, Dv);
    k::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), p.data(), 1, Tl, Hl, Hl, Dq, Dv);
  }
  // useful work, causal half: 4 products over Dq (QK forward, again in backward, dK, dQ), 3 over 128 (PV, dV, dP)
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * Hl * Tl * Tl * (4.0 * Dq + 3.0 * 128) / 2 / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
static void BM_rope_forward(benchmark::State& st) {
  auto qkv = filled(N * 3 * C);
  auto table = k::rope_table(T, D, 10000.0);
  for (auto _ : st) k::rope_forward(qkv.data(), table.data(), B, T, H, H, D);
  bytes(st, 2.0 * N * 2 * C * 4);
}
static void BM_rope_backward(benchmark::State& st) {
  auto qkv = filled(N * 3 * C);
  auto table = k::rope_table(T, D, 10000.0);
  for (auto _ : st) k::rope_backward(qkv.data(), table.data(), B, T, H, H, D);
  bytes(st, 2.0 * N * 2 * C * 4);
}
static void BM_embedding_forward(benchmark::State& st) {
  auto tok = token_ids(7919);
  auto wte = filled(V * C), wpe = filled(T * C), out = filled(N * C);
  for (auto _ : st) {
    k::embedding_forward(out.data(), tok.data(), wte.data(), N, C, 0, V);
    k::position_forward(out.data(), out.data(), wpe.data(), 0, N, T, C);
  }
  bytes(st, 3.0 * N * C * 4);
}
static void BM_embedding_backward(benchmark::State& st) {
  auto tok = token_ids(7919);
  auto dwte = filled(V * C), dwpe = filled(T * C), dout = filled(N * C);
  for (auto _ : st) {
    k::embedding_backward(dwte.data(), dout.data(), tok.data(), N, C, 0, V);
    k::position_backward(dwpe.data(), dout.data(), 0, N, T, C);
  }
  bytes(st, 5.0 * N * C * 4);
}
static void BM_cross_entropy_fused(benchmark::State& st) {
  auto tgt = token_ids(31);
  auto logits = filled(N * V), losses = filled(N);
  for (auto _ : st)
    k::softmax_cross_entropy(losses.data(), logits.data(), tgt.data(), N, V, V,
                             k::LossGrad<float>::scaled(1.0f / float(N)));
  bytes(st, 2.0 * N * V * 4);
}
static void BM_adamw_124m(benchmark::State& st) {
  const int64_t n = 124'000'000;
  auto p = filled(n), m = filled(n), v = filled(n, 0.f), g = filled(n);
  int64_t step = 0;
  for (auto _ : st) k::adamw_update(p.data(), m.data(), v.data(), g.data(), n, {1e-4, 0.9, 0.95, 1e-8, 0.1, ++step});
  bytes(st, 7.0 * n * 4);
}

BENCHMARK(BM_layernorm_forward)->UseRealTime();
BENCHMARK(BM_layernorm_backward)->UseRealTime();
BENCHMARK(BM_rmsnorm_forward)->UseRealTime();
BENCHMARK(BM_rmsnorm_backward)->UseRealTime();
BENCHMARK(BM_gelu_forward)->UseRealTime();
BENCHMARK(BM_gelu_backward)->UseRealTime();
BENCHMARK(BM_swiglu_forward)->UseRealTime();
BENCHMARK(BM_swiglu_backward)->UseRealTime();
BENCHMARK(BM_attention_forward)->UseRealTime();
BENCHMARK(BM_attention_backward)->UseRealTime();
BENCHMARK(BM_attention_long_forward)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK(BM_attention_long_backward)->Arg(1024)->Arg(4096)->UseRealTime();
BENCHMARK(BM_attention_mla)->Arg(128)->Arg(192)->UseRealTime();
BENCHMARK(BM_rope_forward)->UseRealTime();
BENCHMARK(BM_rope_backward)->UseRealTime();
BENCHMARK(BM_embedding_forward)->UseRealTime();
BENCHMARK(BM_embedding_backward)->UseRealTime();
BENCHMARK(BM_cross_entropy_fused)->UseRealTime();
BENCHMARK(BM_adamw_124m)->UseRealTime()->MinTime(1.0);

}  // namespace trident::bench

BENCHMARK_MAIN();
