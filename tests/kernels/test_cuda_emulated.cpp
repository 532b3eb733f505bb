// The CUDA kernels' logic on the CPU: the kernel sources of kernels/cuda
// compiled against kernels/cuda/emulation.hpp (threads and barriers for a
// block's threads, warp shuffles, shared memory) and compared with their
// CPU twins on the shapes test_cuda uses, including odd sizes. This runs
// everywhere and catches indexing, masking, tiling and synchronisation
// mistakes; test_cuda runs the same kernels on a GPU. cuBLASLt (the GEMMs)
// cannot be emulated and is covered by test_cuda alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>

#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/fp8.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/norm.hpp"
#include "kernels/precision.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"
#include "tests/kernels/kernel_compare.hpp"

#define cuda cuda_emu
#include "kernels/cuda/cuda_kernels.hpp"
#undef cuda

namespace trident::kernels::cuda_emu {
[[noreturn]] void cuda_fail(const char* library, const char* stmt, const char* file, int line, const char* message) {
  throw std::runtime_error(std::string(library) + " " + stmt + " at " + file + ":" + std::to_string(line) + ": " +
                           message);
}
}  // namespace trident::kernels::cuda_emu

namespace trident::kernels {
namespace {

namespace emu = cuda_emu;
using F = std::vector<float>;

using test::expect_close;
F randn(int64_t n, uint32_t seed, float scale = 1.f) { return test::randn_f(n, seed, scale); }

TEST(CudaEmulated, FlashAttentionForwardBackward) {
  struct Shape {
    int64_t B, T, H, KV, D, Dv;
  };
  // above 128 (multi-head latent attention's 192) the kernels take tiles of
  // 32 rows; value heads of their own size (MLA: 192 and 128), narrower or wider
  for (Shape s : {Shape{2, 67, 4, 2, 16, 16}, Shape{1, 130, 2, 1, 64, 64}, Shape{1, 65, 2, 2, 128, 128},
                  Shape{2, 5, 3, 3, 7, 7}, Shape{1, 64, 4, 1, 96, 96}, Shape{1, 70, 2, 1, 192, 192},
                  Shape{2, 33, 2, 2, 129, 129}, Shape{1, 40, 1, 1, 256, 256}, Shape{1, 70, 2, 2, 192, 128},
                  Shape{2, 33, 3, 3, 24, 16}, Shape{1, 66, 2, 1, 16, 40}}) {
    const int64_t W = attention_qkv_width(s.H, s.KV, s.D, s.Dv), N = s.B * s.T;
    const std::string name = "attention B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" +
                             std::to_string(s.H) + " KV" + std::to_string(s.KV) + " D" + std::to_string(s.D) + " Dv" +
                             std::to_string(s.Dv);
    F qkv = randn(N * W, 1), dout = randn(N * s.H * s.Dv, 2), out(N * s.H * s.Dv);
    F cpu_lse(static_cast<size_t>(attention_state_elements(s.B, s.T, s.H))), dqkv(N * W);
    attention_forward(out.data(), cpu_lse.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), cpu_lse.data(), s.B, s.T, s.H, s.KV, s.D,
                       s.Dv);
    F eout(out.size(), -7.f), lse(static_cast<size_t>(s.B * s.H * s.T), -7.f), lse2 = lse, edqkv(dqkv.size(), -7.f);
    emu::attention_forward(eout.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    expect_close(name + " output", out, eout, 1e-5, 1e-6);
    emu::attention_lse(lse2.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    expect_close(name + " lse recomputed", lse, lse2, 0, 0);
    expect_close(name + " lse against the CPU twin's", cpu_lse, lse, 1e-5, 1e-6);
    emu::attention_backward(edqkv.data(), dout.data(), qkv.data(), eout.data(), lse.data(), s.B, s.T, s.H, s.KV, s.D,
                            s.Dv);
    expect_close(name + " dqkv", dqkv, edqkv, 1e-5, 1e-6);
  }
}

// Sliding windows (shorter than a tile, across tiles, tiles of 32 above
// head size 128) and attention sinks against the CPU twins: the windowed
// kernels skip whole key and query tiles, the sink kernels fold the sink
// into lse and give its gradient.
TEST(CudaEmulated, SlidingWindowAttentionAndSinks) {
  struct Shape {
    int64_t B, T, H, KV, D, window;
  };
  for (Shape s : {Shape{2, 150, 4, 2, 16, 5}, Shape{1, 130, 2, 1, 64, 70}, Shape{1, 70, 2, 2, 192, 40}}) {
    const int64_t W = attention_qkv_width(s.H, s.KV, s.D, s.D), N = s.B * s.T;
    const std::string name =
        "window " + std::to_string(s.window) + " T" + std::to_string(s.T) + " D" + std::to_string(s.D);
    F qkv = randn(N * W, 3), dout = randn(N * s.H * s.D, 4), sinks = randn(s.H, 5), out(N * s.H * s.D);
    F lse(size_t(s.B * s.H * s.T)), dqkv(N * W), dsinks(size_t(s.H), 0.f);
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.D, nullptr, s.window,
                      sinks.data());
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H, s.KV, s.D, s.D,
                       nullptr, s.window, sinks.data(), dsinks.data());
    F eout(out.size(), -7.f), lse_emu(lse.size(), -7.f), edqkv(dqkv.size(), -7.f), edsinks(dsinks.size(), 0.f);
    emu::attention_forward(eout.data(), lse_emu.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.D, nullptr, s.window,
                           sinks.data());
    expect_close(name + " output", out, eout, 1e-5, 1e-6);
    expect_close(name + " lse", lse, lse_emu, 1e-5, 1e-6);
    emu::attention_backward(edqkv.data(), dout.data(), qkv.data(), eout.data(), lse_emu.data(), s.B, s.T, s.H, s.KV,
                            s.D, s.D, nullptr, s.window, sinks.data(), edsinks.data());
    expect_close(name + " dqkv", dqkv, edqkv, 1e-5, 1e-6);
    expect_close(name + " dsinks", dsinks, edsinks, 1e-4, 1e-5);
  }
}

// Attention blocks (context parallelism) against their CPU twins: rank 1 of
// 3 (chunks 1 and 4 of 6, 40 rows each: two query tiles, positions not
// contiguous) attends to its own block, then merges rank 0's and rank 2's;
// backward adds each block's dq, dk, dv. With and without documents.
void attention_blocks_match_the_cpu(const int64_t D, const int64_t Dv, const int64_t window = 0) {
  const int64_t B = 2, N = 3, c = 40, T = 2 * N * c, Tl = 2 * c, H = 4, KV = 2, W = attention_qkv_width(H, KV, D, Dv);
  std::vector<std::vector<int32_t>> pos(N);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t chunk : {r, 2 * N - 1 - r})
      for (int64_t t = chunk * c; t < (chunk + 1) * c; ++t) pos[size_t(r)].push_back(int32_t(t));
  for (bool documents : {false, true}) {
    const std::vector<int32_t> whole = test::doc_starts(B, T, {{0, 30, 95, 96, 170}, {0, 130}});
    std::vector<int32_t> ds;  // rank 1's rows' document starts (global positions)
    for (int64_t b = 0; b < B; ++b)
      for (int32_t p : pos[1]) ds.push_back(whole[size_t(b * T + p)]);
    std::vector<F> qkv;
    for (int64_t r = 0; r < N; ++r) qkv.push_back(randn(B * Tl * W, uint32_t(40 + r)));
    const F dout = randn(B * Tl * H * Dv, 50);
    auto block = [&](int64_t src) {
      AttentionBlock<float> a;
      a.B = B, a.Tq = Tl, a.Tk = Tl, a.H = H, a.KV = KV, a.D = D, a.Dv = Dv;
      a.q = qkv[1].data(), a.ldq = W, a.k = qkv[size_t(src)].data() + H * D,
      a.v = qkv[size_t(src)].data() + (H + KV) * D;
      a.ldkv = W, a.q_pos = pos[1].data(), a.k_pos = pos[size_t(src)].data(),
      a.doc_start = documents ? ds.data() : nullptr, a.window = window;
      return a;
    };
    const std::string what = std::string(documents ? "blocks with documents" : "blocks") + " D" + std::to_string(D) +
                             " Dv" + std::to_string(Dv) + " window " + std::to_string(window);
    F out(size_t(B * Tl * H * Dv)), lse(size_t(B * H * Tl)), eout(out.size(), -7.f), lse_emu(lse.size(), -7.f);
    for (int64_t step = 0; step < N; ++step) {
      const int64_t src = (1 - step + N) % N;
      attention_block_forward(out.data(), H * Dv, lse.data(), block(src), step > 0);
      emu::attention_block_forward(eout.data(), H * Dv, lse_emu.data(), block(src), step > 0);
      expect_close(what + " output after " + std::to_string(step + 1) + " block(s)", out, eout, 1e-5, 1e-6);
      expect_close(what + " lse after " + std::to_string(step + 1) + " block(s)", lse, lse_emu, 1e-5, 1e-6);
    }
    F delta(lse.size()), edelta(lse.size(), -7.f);
    attention_delta(delta.data(), dout.data(), out.data(), H * Dv, B, Tl, H, Dv);
    emu::attention_delta(edelta.data(), dout.data(), out.data(), H * Dv, B, Tl, H, Dv);
    expect_close(what + " delta", delta, edelta, 1e-5, 1e-6);
    F dq(qkv[1].size(), 0.f), edq = dq;
    std::vector<F> dkv(N, F(qkv[1].size(), 0.f)), edkv = dkv;
    for (int64_t src = 0; src < N; ++src) {
      attention_block_backward(dq.data(), W, dkv[size_t(src)].data() + H * D, dkv[size_t(src)].data() + (H + KV) * D, W,
                               dout.data(), H * Dv, lse.data(), delta.data(), block(src));
      emu::attention_block_backward(edq.data(), W, edkv[size_t(src)].data() + H * D,
                                    edkv[size_t(src)].data() + (H + KV) * D, W, dout.data(), H * Dv, lse.data(),
                                    delta.data(), block(src));
      expect_close(what + " dk, dv of block " + std::to_string(src), dkv[size_t(src)], edkv[size_t(src)], 1e-4, 1e-5);
    }
    expect_close(what + " dq", dq, edq, 1e-4, 1e-5);
  }
}

// Head sizes 16 (tiles of 64) and 192 (tiles of 32: three query tiles),
// and multi-head latent attention's values of their own size.
TEST(CudaEmulated, AttentionBlocksMatchTheCpu) {
  for (const int64_t D : {16, 192}) attention_blocks_match_the_cpu(D, D);
  attention_blocks_match_the_cpu(192, 128);
  attention_blocks_match_the_cpu(12, 20);
  attention_blocks_match_the_cpu(16, 16, 25);  // a window shorter than a block (40 rows)
}

// The device keeps a copy of each rope table: a table rewritten in place
// (another theta at the same host address and size) must not be served stale.
TEST(CudaEmulated, RopeTableRewrittenInPlaceIsNotServedStale) {
  const int64_t B = 1, T = 12, H = 2, KV = 1, D = 8, W = (H + 2 * KV) * D;
  auto table = rope_table(T, D, 10000.0);
  const F x = randn(B * T * W, 31);
  for (double theta : {10000.0, 500000.0, 10.0}) {
    const auto fresh = rope_table(T, D, theta);
    std::copy(fresh.begin(), fresh.end(), table.begin());
    F a = x, b = x;
    rope_forward(a.data(), fresh.data(), B, T, H, KV, D);
    emu::rope_forward(b.data(), table.data(), B, T, H, KV, D, nullptr);
    expect_close("rope forward, theta " + std::to_string(theta), a, b, 1e-6, 1e-6);
  }
}

// Document masking in the flash kernels (keys before a query's document
// start are masked inside and across tiles), rotary and learned positions.
TEST(CudaEmulated, DocumentMaskedAttentionRotaryAndPositions) {
  const int64_t B = 2, T = 150, H = 4, KV = 2, D = 16, W = (H + 2 * KV) * D, N = B * T, C = 9;
  const std::vector<int32_t> ds = test::doc_starts(B, T, {{0, 3, 64, 65, 100, 149}, {0, 70}});
  const auto table = rope_table(T, D, 10000.0);
  F qkv = randn(N * W, 21), q2 = qkv, dout = randn(N * H * D, 22);
  rope_forward(qkv.data(), table.data(), B, T, H, KV, D, ds.data());
  emu::rope_forward(q2.data(), table.data(), B, T, H, KV, D, ds.data());
  expect_close("masked rope forward", qkv, q2, 1e-6, 1e-6);
  F out(N * H * D), cpu_lse(static_cast<size_t>(B * H * T)), dqkv(N * W);
  attention_forward(out.data(), cpu_lse.data(), qkv.data(), B, T, H, KV, D, D, ds.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), cpu_lse.data(), B, T, H, KV, D, D, ds.data());
  F eout(out.size(), -7.f), lse(static_cast<size_t>(B * H * T), -7.f), edqkv(dqkv.size(), -7.f);
  emu::attention_forward(eout.data(), lse.data(), qkv.data(), B, T, H, KV, D, D, ds.data());
  expect_close("masked attention output", out, eout, 1e-5, 1e-6);
  emu::attention_backward(edqkv.data(), dout.data(), qkv.data(), eout.data(), lse.data(), B, T, H, KV, D, D, ds.data());
  expect_close("masked attention dqkv", dqkv, edqkv, 1e-5, 1e-6);
  F g1 = dqkv, g2 = dqkv;
  rope_backward(g1.data(), table.data(), B, T, H, KV, D, ds.data());
  emu::rope_backward(g2.data(), table.data(), B, T, H, KV, D, ds.data());
  expect_close("masked rope backward", g1, g2, 1e-6, 1e-6);
  const int64_t row0 = 40, rows = 200;  // a sequence shard crossing the batch boundary
  F wpe = randn(T * C, 23), pin = randn(rows * C, 24), p1(rows * C), p2(rows * C), dp1 = randn(T * C, 25), dp2 = dp1;
  position_forward(p1.data(), pin.data(), wpe.data(), row0, rows, T, C, ds.data());
  emu::position_forward(p2.data(), pin.data(), wpe.data(), row0, rows, T, C, ds.data());
  expect_close("masked position forward", p1, p2, 0, 0);
  position_backward(dp1.data(), pin.data(), row0, rows, T, C, ds.data());
  emu::position_backward(dp2.data(), pin.data(), row0, rows, T, C, ds.data());
  expect_close("masked position backward", dp1, dp2, 1e-6, 1e-6);
}

TEST(CudaEmulated, LayerNormAndRmsNorm) {
  for (auto [N, C] : std::vector<std::array<int64_t, 2>>{{7, 129}, {33, 300}, {3, 5}})
    for (bool acc : {false, true}) {
      F x = randn(N * C, 1, 2.f), w = randn(C, 2), b = randn(C, 3), g = randn(N * C, 4);
      F out(N * C), mean(N), rstd(N), dx = randn(N * C, 5), dw = randn(C, 6), db = randn(C, 7);
      F eout(N * C), emean(N), erstd(N), edx = dx, edw = dw, edb = db;
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
      emu::layernorm_forward(eout.data(), emean.data(), erstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
      expect_close("layernorm out", out, eout, 1e-5, 1e-6);
      expect_close("layernorm mean", mean, emean, 1e-5, 1e-6);
      expect_close("layernorm rstd", rstd, erstd, 1e-5);
      layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C,
                         acc);
      emu::layernorm_backward(edx.data(), edw.data(), edb.data(), g.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C, acc);
      expect_close("layernorm dinp", dx, edx, 1e-5, 1e-6);
      expect_close("layernorm dweight", dw, edw, 1e-5, 1e-6);
      expect_close("layernorm dbias", db, edb, 1e-5, 1e-6);
      F rout(N * C), erout(N * C), rdx = randn(N * C, 8), rdw = randn(C, 9), erdx = rdx, erdw = rdw;
      rmsnorm_forward(rout.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
      emu::rmsnorm_forward(erout.data(), erstd.data(), x.data(), w.data(), N, C, 1e-6);
      expect_close("rmsnorm out", rout, erout, 1e-5, 1e-6);
      rmsnorm_backward(rdx.data(), rdw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, acc);
      emu::rmsnorm_backward(erdx.data(), erdw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, acc);
      expect_close("rmsnorm dinp", rdx, erdx, 1e-5, 1e-6);
      expect_close("rmsnorm dweight", rdw, erdw, 1e-5, 1e-6);
    }
}

TEST(CudaEmulated, ElementwiseRotaryAndEmbeddings) {
  const int64_t n = 1001, N = 5, Fh = 67;
  F x = randn(n, 1, 3.f), g = randn(n, 2), o1(n), o2(n), d1(n), d2(n);
  gelu_forward(o1.data(), x.data(), n), emu::gelu_forward(o2.data(), x.data(), n);
  expect_close("gelu", o1, o2, 2e-6, 1e-6);
  gelu_backward(d1.data(), x.data(), g.data(), n), emu::gelu_backward(d2.data(), x.data(), g.data(), n);
  expect_close("gelu backward", d1, d2, 2e-6, 1e-6);
  F in = randn(N * 2 * Fh, 3, 2.f), dd = randn(N * Fh, 4), s1(N * Fh), s2(N * Fh), sd1(N * 2 * Fh), sd2(N * 2 * Fh);
  swiglu_forward(s1.data(), in.data(), N, Fh), emu::swiglu_forward(s2.data(), in.data(), N, Fh);
  expect_close("swiglu", s1, s2, 2e-6, 1e-6);
  swiglu_backward(sd1.data(), in.data(), dd.data(), N, Fh),
      emu::swiglu_backward(sd2.data(), in.data(), dd.data(), N, Fh);
  expect_close("swiglu backward", sd1, sd2, 2e-6, 1e-6);
  clamped_swiglu_forward(s1.data(), in.data(), N, Fh, 1.702, 0.8);
  emu::clamped_swiglu_forward(s2.data(), in.data(), N, Fh, 1.702, 0.8);
  expect_close("clamped swiglu", s1, s2, 2e-6, 1e-6);
  clamped_swiglu_backward(sd1.data(), in.data(), dd.data(), N, Fh, 1.702, 0.8);
  emu::clamped_swiglu_backward(sd2.data(), in.data(), dd.data(), N, Fh, 1.702, 0.8);
  expect_close("clamped swiglu backward", sd1, sd2, 2e-6, 1e-6);
  {  // the experts' biases: groups of 3, 0 and N - 3 rows
    const std::vector<int64_t> off = {0, 3, 3, N};
    F y1 = in, y2 = in, bias = randn(3 * Fh, 9), db1(size_t(3 * Fh)), db2(size_t(3 * Fh), -1.f);
    grouped_bias_forward(y1.data(), bias.data(), off.data(), 3, Fh);
    emu::grouped_bias_forward(y2.data(), bias.data(), off.data(), 3, Fh);
    expect_close("grouped bias", y1, y2, 0, 0);
    grouped_bias_backward(db1.data(), in.data(), off.data(), 3, Fh, false);
    emu::grouped_bias_backward(db2.data(), in.data(), off.data(), 3, Fh, false);
    expect_close("grouped bias backward", db1, db2, 1e-6, 1e-6);
  }
  // rotary
  const int64_t B = 2, T = 9, H = 3, KV = 1, D = 6, W = (H + 2 * KV) * D;
  const auto table = rope_table(T, D, 10000.0);
  F q = randn(B * T * W, 5), q2 = q;
  rope_forward(q.data(), table.data(), B, T, H, KV, D), emu::rope_forward(q2.data(), table.data(), B, T, H, KV, D);
  expect_close("rope forward", q, q2, 1e-6, 1e-6);
  rope_backward(q.data(), table.data(), B, T, H, KV, D), emu::rope_backward(q2.data(), table.data(), B, T, H, KV, D);
  expect_close("rope backward", q, q2, 1e-6, 1e-6);
  // embeddings over a vocabulary range, positions of a sequence shard
  const int64_t M = 37, C = 13, V = 11, vb = 5, P = 8, row0 = 3, rows = 21;
  std::vector<int32_t> tok(static_cast<size_t>(M));
  for (int64_t i = 0; i < M; ++i) tok[size_t(i)] = int32_t((i * 7) % 20);
  F wte = randn(V * C, 6), e1(M * C), e2(M * C), dout = randn(M * C, 7), dw1 = randn(V * C, 8), dw2 = dw1;
  embedding_forward(e1.data(), tok.data(), wte.data(), M, C, vb, V);
  emu::embedding_forward(e2.data(), tok.data(), wte.data(), M, C, vb, V);
  expect_close("embedding forward", e1, e2, 0, 0);
  embedding_backward(dw1.data(), dout.data(), tok.data(), M, C, vb, V);
  emu::embedding_backward(dw2.data(), dout.data(), tok.data(), M, C, vb, V);
  expect_close("embedding backward", dw1, dw2, 1e-6, 1e-6);
  F wpe = randn(P * C, 9), pin = randn(rows * C, 10), p1(rows * C), p2(rows * C), dp1 = randn(P * C, 11), dp2 = dp1;
  position_forward(p1.data(), pin.data(), wpe.data(), row0, rows, P, C);
  emu::position_forward(p2.data(), pin.data(), wpe.data(), row0, rows, P, C);
  expect_close("position forward", p1, p2, 0, 0);
  position_backward(dp1.data(), pin.data(), row0, rows, P, C);
  emu::position_backward(dp2.data(), pin.data(), row0, rows, P, C);
  expect_close("position backward", dp1, dp2, 1e-6, 1e-6);
  // residual and bias gradient
  F a = randn(19 * 23, 12), bb = randn(19 * 23, 13), bias = randn(23, 14), r1(19 * 23), r2(19 * 23);
  residual_forward(r1.data(), a.data(), bb.data(), bias.data(), 19, 23);
  emu::residual_forward(r2.data(), a.data(), bb.data(), bias.data(), 19, 23);
  expect_close("residual", r1, r2, 0, 0);
  for (bool acc : {true, false}) {
    F db1 = randn(23, 15), db2 = db1;
    bias_backward(db1.data(), a.data(), 19, 23, acc), emu::bias_backward(db2.data(), a.data(), 19, 23, acc);
    expect_close("bias gradient", db1, db2, 1e-6, 1e-6);
  }
}

TEST(CudaEmulated, CrossEntropyFusedAndVocabParallel) {
  const int64_t N = 13, V = 70, Vvalid = 67;
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tgt[size_t(i)] = i % 4 == 3 ? -1 : int32_t((i * 11) % Vvalid);  // -1: ignored
  F logits = randn(N * V, 1, 3.f), l1 = logits, l2 = logits, loss1(N), loss2(N);
  softmax_cross_entropy(loss1.data(), l1.data(), tgt.data(), N, V, Vvalid, LossGrad<float>::scaled(0.5f));
  emu::softmax_cross_entropy(loss2.data(), l2.data(), tgt.data(), N, V, Vvalid, true, 0.5f);
  expect_close("cross-entropy losses", loss1, loss2, 1e-5, 1e-6);
  expect_close("cross-entropy dlogits", l1, l2, 1e-5, 1e-7);
  const int64_t vb = 30, Vl = 40, Vlvalid = Vvalid - vb;
  F part(static_cast<size_t>(N * Vl));
  for (int64_t n = 0; n < N; ++n) std::copy_n(logits.begin() + n * V + vb, Vl, part.begin() + n * Vl);
  F p1 = part, p2 = part, mx1(N), mx2(N), s1(2 * N), s2(2 * N), f1(N), f2(N);
  cross_entropy_local_max(mx1.data(), p1.data(), N, Vl, Vlvalid);
  emu::cross_entropy_local_max(mx2.data(), p2.data(), N, Vl, Vlvalid);
  expect_close("local max", mx1, mx2, 0, 0);
  cross_entropy_local_sums(s1.data(), p1.data(), mx1.data(), tgt.data(), N, Vl, Vlvalid, vb);
  emu::cross_entropy_local_sums(s2.data(), p2.data(), mx1.data(), tgt.data(), N, Vl, Vlvalid, vb);
  expect_close("local sums", s1, s2, 1e-5, 1e-6);
  cross_entropy_finish(f1.data(), p1.data(), mx1.data(), s1.data(), tgt.data(), N, Vl, Vlvalid, vb,
                       LossGrad<float>::scaled(0.25f));
  emu::cross_entropy_finish(f2.data(), p2.data(), mx1.data(), s1.data(), tgt.data(), N, Vl, Vlvalid, vb, true, 0.25f);
  expect_close("finish losses", f1, f2, 1e-5, 1e-6);
  expect_close("finish dlogits", p1, p2, 1e-5, 1e-7);
  // a zero scale writes a zero gradient, forward only leaves the logits
  F z = logits, kept = logits;
  emu::softmax_cross_entropy(loss2.data(), z.data(), tgt.data(), N, V, Vvalid, true, 0.f);
  emu::softmax_cross_entropy(loss2.data(), kept.data(), tgt.data(), N, V, Vvalid, false, 0.5f);
  expect_close("zero-scale dlogits", z, F(z.size(), 0.f), 0, 0);
  expect_close("forward-only logits", kept, logits, 0, 0);
}

TEST(CudaEmulated, MultiTensorAdamWRoundingAndSums) {
  const int64_t n = 140003;
  F p = randn(n, 1), m = randn(n, 2, 0.1f), v = randn(n, 3, 0.1f), g = randn(n, 4);
  for (auto& x : v) x = std::abs(x);
  F p2 = p, m2 = m, v2 = v;
  const std::vector<AdamWRange> ranges = {{0, 70000, 0.1}, {70000, 17, 0.0}, {70017, n - 70017, 0.05}};
  adamw_update_multi(p.data(), m.data(), v.data(), g.data(), ranges, {3e-3, 0.9, 0.95, 1e-8, 0.0, 7, 0.5});
  std::vector<cuda_emu::AdamWRangeDevice> dr;
  for (const auto& r : ranges) dr.push_back({r.offset, r.size, float(r.weight_decay)});
  emu::adamw_update_multi(p2.data(), m2.data(), v2.data(), g.data(), dr, 3e-3, 0.9, 0.95, 1e-8, 7, 0.5);
  expect_close("adamw params", p, p2, 1e-6, 1e-7);
  expect_close("adamw m", m, m2, 1e-6, 1e-8);
  expect_close("adamw v", v, v2, 1e-6, 1e-8);
  F x = randn(20001, 5, 1000.f);
  x[5] = 1e6f, x[6] = 1e-30f;
  for (auto [p_, mode] : {std::pair{Precision::bf16, 1}, std::pair{Precision::fp16, 2}}) {
    F a = x, b = x;
    round_to_storage(a.data(), int64_t(a.size()), p_);
    emu::round_to_storage(b.data(), int64_t(b.size()), mode);
    EXPECT_EQ(a, b) << precision_name(p_);
    EXPECT_EQ(count_nonfinite(a.data(), int64_t(a.size())), emu::count_nonfinite(b.data(), int64_t(b.size())));
    // 2-byte packing of the rounded values, and back: the CPU's bit patterns, exact round trip
    std::vector<uint16_t> pa(a.size()), pb(a.size());
    pack_16(pa.data(), a.data(), int64_t(a.size()), p_);
    emu::pack_16(pb.data(), a.data(), int64_t(a.size()), mode);
    EXPECT_EQ(pa, pb) << precision_name(p_) << " packing";
    F ua(a.size()), ub(a.size());
    unpack_16(ua.data(), pa.data(), int64_t(a.size()), p_);
    emu::unpack_16(ub.data(), pa.data(), int64_t(a.size()), mode);
    EXPECT_EQ(ua, ub) << precision_name(p_) << " unpacking";
    for (size_t i = 0; i < a.size(); ++i)
      if (std::isfinite(a[i])) ASSERT_EQ(ua[i], a[i]) << precision_name(p_) << " round trip at " << i;
  }
  EXPECT_NEAR(emu::sum(x.data(), int64_t(x.size())) / sum(x.data(), int64_t(x.size())), 1.0, 1e-12);
  const std::vector<std::pair<int64_t, int64_t>> r = {{0, 100}, {200, 20001}};
  EXPECT_NEAR(emu::sum_of_squares_ranges(x.data(), r) / sum_of_squares_ranges(x.data(), r), 1.0, 1e-12);
}

// The MoE permutation: the CUDA counting sort (a block per expert, a block
// scan over chunks of routes) gives the CPU's rows, tokens and offsets
// exactly, with more routes than a block's threads, experts without rows
// and k = 1; the gather, combine and their backwards agree.
TEST(CudaEmulated, MoePermutationGatherAndCombine) {
  struct Shape {
    int64_t N, K, E, C;
  };
  for (Shape s : {Shape{150, 2, 8, 9}, Shape{7, 1, 5, 3}, Shape{70, 4, 12, 17}}) {
    const int64_t N = s.N, K = s.K, E = s.E, C = s.C, M = N * K;
    const std::string name = "moe N" + std::to_string(N) + " k" + std::to_string(K) + " E" + std::to_string(E);
    const std::vector<int32_t> expert = test::moe_routes(N, K, E, uint32_t(N));
    std::vector<int32_t> row(static_cast<size_t>(M)), token(row.size()), erow(row.size(), -1), etoken(row.size(), -1);
    std::vector<int64_t> off(static_cast<size_t>(E + 1)), eoff(off.size(), -1);
    moe_route_index(row.data(), token.data(), off.data(), expert.data(), N, K, E);
    emu::moe_route_index(erow.data(), etoken.data(), eoff.data(), expert.data(), N, K, E);
    EXPECT_EQ(row, erow) << name;
    EXPECT_EQ(token, etoken) << name;
    EXPECT_EQ(off, eoff) << name;
    EXPECT_EQ(off[size_t(E - 1)], off[size_t(E)]) << name << ": the last expert has no rows";
    for (int64_t r = 1; r < M; ++r) {  // expert-major, tokens increasing within an expert
      const int64_t a = std::upper_bound(off.begin(), off.end(), r - 1) - off.begin(),
                    b = std::upper_bound(off.begin(), off.end(), r) - off.begin();
      if (a == b) ASSERT_LT(token[size_t(r - 1)], token[size_t(r)]) << name << " row " << r;
    }
    F h = randn(N * C, 31), x(M * C), ex(M * C, -7.f);
    moe_permute(x.data(), h.data(), token.data(), M, C), emu::moe_permute(ex.data(), h.data(), token.data(), M, C);
    expect_close(name + " permute", x, ex, 0, 0);
    F y = randn(M * C, 32), w = randn(M, 33), out(N * C), eout(N * C, -7.f);
    moe_combine(out.data(), y.data(), w.data(), row.data(), N, K, C);
    emu::moe_combine(eout.data(), y.data(), w.data(), row.data(), N, K, C);
    expect_close(name + " combine", out, eout, 1e-6, 1e-6);
    F dy = randn(N * C, 34), dys(M * C), edys(M * C, -7.f), dw(M), edw(M, -7.f);
    moe_combine_backward(dys.data(), dw.data(), dy.data(), y.data(), w.data(), row.data(), N, K, C);
    emu::moe_combine_backward(edys.data(), edw.data(), dy.data(), y.data(), w.data(), row.data(), N, K, C);
    expect_close(name + " combine backward (rows)", dys, edys, 0, 0);
    expect_close(name + " combine backward (weights)", dw, edw, 1e-5, 1e-5);
    F dx = randn(M * C, 35), dh(N * C), edh(N * C, -7.f);
    moe_unpermute(dh.data(), dx.data(), row.data(), N, K, C);
    emu::moe_unpermute(edh.data(), dx.data(), row.data(), N, K, C);
    expect_close(name + " unpermute", dh, edh, 0, 0);
  }
}

// The MoE layer's row ops and QK-norm's head moves: the shared experts'
// gate (scaling rows, adding them), its gradient (a warp's dot product per
// row), the heads of a fused QKV row to one row each and back, with odd
// sizes, more rows than a block's threads, and the value heads untouched;
// and the correction bias's sign step, bit for bit.
// Multi-head latent attention's head assembly and interleaved rotary
// against their CPU twins; the CPU backward is the forward's adjoint
// (<heads(q, kvb, kr), g> = <q, dq> + <kvb, dkvb> + <kr, dkr>) and the
// rotary backward undoes the forward.
TEST(CudaEmulated, MlaHeadsAndInterleavedRope) {
  struct Mla {
    int64_t B, T, H, Dn, Dr, Dv;
  };
  for (Mla s : {Mla{2, 7, 4, 4, 4, 3}, Mla{1, 33, 2, 8, 6, 14}, Mla{1, 5, 3, 2, 2, 4}}) {
    const int64_t N = s.B * s.T, Dq = s.Dn + s.Dr, W = s.H * (2 * Dq + s.Dv), Wkv = s.H * (s.Dn + s.Dv);
    const std::string name =
        "mla H" + std::to_string(s.H) + " Dn" + std::to_string(s.Dn) + " Dv" + std::to_string(s.Dv);
    const F q = randn(N * s.H * Dq, 51), kvb = randn(N * Wkv, 52), kr = randn(N * s.Dr, 53), g = randn(N * W, 54);
    F qkv(N * W, -7.f), eqkv(N * W, -3.f);
    mla_heads(qkv.data(), q.data(), kvb.data(), kr.data(), N, s.H, s.Dn, s.Dr, s.Dv);
    emu::mla_heads(eqkv.data(), q.data(), kvb.data(), kr.data(), N, s.H, s.Dn, s.Dr, s.Dv);
    expect_close(name + " heads", qkv, eqkv, 0, 0);
    F dq(q.size()), dkvb(kvb.size()), dkr(kr.size()), edq(q.size(), -7.f), edkvb(kvb.size(), -7.f), edkr(kr.size());
    mla_heads_backward(dq.data(), dkvb.data(), dkr.data(), g.data(), N, s.H, s.Dn, s.Dr, s.Dv);
    emu::mla_heads_backward(edq.data(), edkvb.data(), edkr.data(), g.data(), N, s.H, s.Dn, s.Dr, s.Dv);
    expect_close(name + " dq", dq, edq, 0, 0);
    expect_close(name + " dkvb", dkvb, edkvb, 0, 0);
    expect_close(name + " dkr", dkr, edkr, 1e-6, 1e-6);
    auto dot = [](const F& a, const F& b) {
      double d = 0;
      for (size_t i = 0; i < a.size(); ++i) d += double(a[i]) * double(b[i]);
      return d;
    };
    EXPECT_NEAR(dot(qkv, g), dot(q, dq) + dot(kvb, dkvb) + dot(kr, dkr), 1e-3) << name << ": backward is the adjoint";
    EXPECT_EQ(qkv[size_t(2 * s.H * Dq + s.Dv)], kvb[size_t(2 * s.Dn + s.Dv)])
        << name << ": value head 1 starts Dv after value head 0, unpadded";
    // rotary on the query heads' rope parts (rows of H Dq) and on the shared key (rows of Dr)
    const auto table = rope_table(s.T, s.Dr, 10000.0);
    F x = q, ex = q;
    rope_pairs_forward(x.data(), table.data(), s.B, s.T, s.H, s.H * Dq, Dq, s.Dn, s.Dr);
    emu::rope_pairs(ex.data(), table.data(), s.B, s.T, s.H, s.H * Dq, Dq, s.Dn, s.Dr, 1.0, nullptr);
    expect_close(name + " rope pairs", x, ex, 1e-6, 1e-6);
    EXPECT_EQ(x[0], q[0]) << name << ": the nope part is not rotated";
    if (s.T > 1) EXPECT_NE(x[size_t(s.H * Dq + s.Dn)], q[size_t(s.H * Dq + s.Dn)]) << name << ": position 1 rotates";
    rope_pairs_backward(x.data(), table.data(), s.B, s.T, s.H, s.H * Dq, Dq, s.Dn, s.Dr);
    expect_close(name + " rope pairs inverse", x, q, 1e-5, 1e-6);
  }
}

TEST(CudaEmulated, MoeRowsHeadsAndBiasStep) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{300, 7}, {5, 70}, {1, 1}}) {
    const std::string name = "rows N" + std::to_string(N) + " C" + std::to_string(C);
    const F x = randn(N * C, 41), y = randn(N * C, 42), g = randn(N, 43), base = randn(N * C, 44);
    F out = base, eout = base;
    rows_scale_add(out.data(), x.data(), g.data(), N, C), emu::rows_scale_add(eout.data(), x.data(), g.data(), N, C);
    expect_close(name + " scale_add", out, eout, 1e-6, 1e-6);  // a fused multiply-add or not
    rows_scale_add(out.data(), x.data(), static_cast<const float*>(nullptr), N, C);
    emu::rows_scale_add(eout.data(), x.data(), nullptr, N, C);
    expect_close(name + " add", out, eout, 1e-6, 1e-6);
    F sc(N * C), esc(N * C, -7.f);
    rows_scale(sc.data(), x.data(), g.data(), N, C), emu::rows_scale(esc.data(), x.data(), g.data(), N, C);
    expect_close(name + " scale", sc, esc, 0, 0);
    F d(N), ed(N, -7.f);
    rows_dot(d.data(), x.data(), y.data(), N, C), emu::rows_dot(ed.data(), x.data(), y.data(), N, C);
    expect_close(name + " dot", d, ed, 1e-5, 1e-5);
  }
  struct Heads {
    int64_t N, H, KV, D;
  };
  for (Heads s : {Heads{37, 4, 2, 8}, Heads{3, 3, 3, 5}, Heads{70, 2, 1, 16}}) {
    const int64_t W = (s.H + 2 * s.KV) * s.D, rows = s.N * (s.H + s.KV) * s.D;
    const std::string name = "heads N" + std::to_string(s.N) + " H" + std::to_string(s.H);
    const F qkv = randn(s.N * W, 45), heads = randn(rows, 46);
    F hd(rows), ehd(rows, -7.f);
    heads_gather(hd.data(), qkv.data(), s.N, s.H, s.KV, s.D, W);
    emu::heads_gather(ehd.data(), qkv.data(), s.N, s.H, s.KV, s.D, W);
    expect_close(name + " gather", hd, ehd, 0, 0);
    EXPECT_EQ(hd[size_t(s.N * s.H * s.D)], qkv[size_t(s.H * s.D)])
        << name << ": the first key head follows the queries";
    F back = qkv, eback = qkv;
    heads_scatter(back.data(), heads.data(), s.N, s.H, s.KV, s.D, W);
    emu::heads_scatter(eback.data(), heads.data(), s.N, s.H, s.KV, s.D, W);
    expect_close(name + " scatter", back, eback, 0, 0);
    for (int64_t n = 0; n < s.N; ++n)  // the value heads are untouched
      for (int64_t i = (s.H + s.KV) * s.D; i < W; ++i) ASSERT_EQ(back[size_t(n * W + i)], qkv[size_t(n * W + i)]);
  }
  const F counts = {3, 5, 4, 4, 0, 9, 4};
  F bias = randn(int64_t(counts.size()), 47), ebias = bias;
  bias_sign_update(bias.data(), counts.data(), int64_t(counts.size()), 1e-3, 4.0);
  emu::bias_sign_update(ebias.data(), counts.data(), int64_t(counts.size()), 1e-3, 4.0);
  expect_close("bias sign step", bias, ebias, 0, 0);
  const F before = randn(int64_t(counts.size()), 47);
  EXPECT_EQ(bias[2], before[2]) << "a balanced expert's bias stays";
  EXPECT_EQ(bias[0], before[0] + 1e-3f) << "an underloaded expert's bias rises";
  EXPECT_EQ(bias[5], before[5] - 1e-3f) << "an overloaded expert's bias falls";
}

// Bit for bit, except that any NaN equals any NaN (a NaN's sign after a
// product of two NaNs is the compiler's choice of operand order).
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return false;
  return true;
}

// FP8 on CUDA against the CPU code, bit for bit: every code's value and its
// neighbours one float ulp away, subnormals, past-the-largest values,
// infinities, NaNs, random values over many magnitudes; tensorwise with a
// given scale (codes and fake-quantised values), the amax (NaN kept),
// 1 x 128 tiles and 128 x 128 blocks with and without power-of-two scales,
// a zero tile and a NaN tile among them.
TEST(CudaEmulated, Fp8CastsAndScalings) {
  F x;
  for (fp8::Format f : {fp8::Format::e4m3, fp8::Format::e5m2})
    for (int b = 0; b < 256; ++b) {
      const float v = fp8::decode(f, uint8_t(b));
      x.push_back(v), x.push_back(std::nextafter(v, 1e30f)), x.push_back(std::nextafter(v, -1e30f));
    }
  for (float v : {500.f, 1e6f, 61439.f, 61440.f, 1e30f, -3e38f, 1e-40f, -1e-45f, 0.f, -0.f})
    x.push_back(v), x.push_back(std::numeric_limits<float>::infinity()), x.push_back(-v);
  for (float scale : {1e-6f, 1e-2f, 1.f, 100.f, 3e4f}) {
    const F r = randn(96, uint32_t(scale * 7 + 3), scale);
    x.insert(x.end(), r.begin(), r.end());
  }
  ASSERT_LE(x.size(), 32u * 128u);
  x.resize(32 * 128, 0.5f);  // 32 rows of one 1 x 128 tile (the emulation runs a block's threads one by one)
  const int64_t n = int64_t(x.size()), cols = 128;
  for (int64_t i = 0; i < 128; ++i) x[size_t(31 * cols + i)] = 0.f;  // a zero tile (the last row)
  for (fp8::Format f : {fp8::Format::e4m3, fp8::Format::e5m2}) {
    const int fi = f == fp8::Format::e4m3 ? 0 : 1;
    const float scale = 448.f / 3.7f;
    std::vector<uint8_t> q(x.size()), qc(x.size());
    F y(x.size()), yc(x.size());
    emu::fp8_quantize(q.data(), x.data(), n, scale, fi);
    fp8::quantize(f, x.data(), n, scale, qc.data());
    EXPECT_EQ(q, qc) << "format " << fi;
    emu::fp8_fake_quantize(y.data(), x.data(), n, scale, fi);
    fp8::fake_quantize(f, x.data(), n, scale, yc.data());
    EXPECT_TRUE(same_values(y, yc)) << "format " << fi;
  }
  F finite(x.begin() + 1536, x.end());  // past the codes (NaN among them)
  for (float& v : finite)
    if (!std::isfinite(v)) v = 1.f;
  EXPECT_EQ(emu::fp8_amax(finite.data(), int64_t(finite.size())), fp8::amax(finite.data(), int64_t(finite.size())));
  EXPECT_TRUE(std::isnan(emu::fp8_amax(x.data(), n)));  // NaN kept, as the CPU's
  F block(128 * 128);                                   // one 128 x 128 block: the tiles' rows four times over
  for (size_t i = 0; i < block.size(); ++i) {
    const float v = x[i % x.size()] * (i < x.size() ? 1.f : 0.25f);
    block[i] = std::isfinite(v) ? v : 1.f;  // finite: a NaN would make the block's scale NaN (the tiles check that)
  }
  for (bool square : {false, true})
    for (bool pow2 : {false, true}) {
      const F& in = square ? block : x;
      const int64_t rows = int64_t(in.size()) / cols, ns = square ? 1 : rows;
      std::vector<uint8_t> q(in.size()), qc(in.size());
      F s(static_cast<size_t>(ns)), sc(static_cast<size_t>(ns)), y(in.size()), yc(in.size());
      const int64_t tr = square ? 128 : 1;
      emu::fp8_quantize_tiled(q.data(), nullptr, s.data(), in.data(), rows, cols, tr, 128, pow2);
      emu::fp8_quantize_tiled(nullptr, y.data(), nullptr, in.data(), rows, cols, tr, 128, pow2);
      if (square) {
        fp8::quantize_blocks(in.data(), rows, cols, pow2, qc.data(), sc.data());
        fp8::fake_quantize_blocks(in.data(), rows, cols, pow2, yc.data());
      } else {
        fp8::quantize_tiles(in.data(), rows, cols, pow2, qc.data(), sc.data());
        fp8::fake_quantize_tiles(in.data(), rows, cols, pow2, yc.data());
      }
      EXPECT_EQ(q, qc) << "square " << square << " pow2 " << pow2;
      EXPECT_EQ(std::memcmp(s.data(), sc.data(), s.size() * 4), 0) << "square " << square << " pow2 " << pow2;
      EXPECT_TRUE(same_values(y, yc)) << "square " << square << " pow2 " << pow2;
      if (!square) EXPECT_EQ(s[31], 0.f);  // the zero tile
      if (square) EXPECT_GT(s[0], 0.f);
    }
  // the training GEMMs' tiles: rows along, columns down, blocks, partial at the edges
  const int64_t rows = 136, ncols = 72;
  F m(static_cast<size_t>(rows * ncols));
  for (size_t i = 0; i < m.size(); ++i) m[i] = finite[i % finite.size()] * float(1 + i % 7);
  for (fp8::Tile t : {fp8::kRowTile, fp8::kColumnTile, fp8::kSquareBlock, fp8::Tile{48, 40}}) {
    const auto ns = static_cast<size_t>(fp8::tile_count(rows, ncols, t));
    std::vector<uint8_t> q(m.size()), qc(m.size());
    F s(ns), sc(ns), y(m.size()), yc(m.size());
    emu::fp8_quantize_tiled(q.data(), y.data(), s.data(), m.data(), rows, ncols, t.rows, t.cols, true);
    fp8::quantize_tiled(m.data(), rows, ncols, t, true, qc.data(), yc.data(), sc.data());
    EXPECT_EQ(q, qc) << t.rows << " x " << t.cols;
    EXPECT_EQ(std::memcmp(s.data(), sc.data(), s.size() * 4), 0) << t.rows << " x " << t.cols;
    EXPECT_TRUE(same_values(y, yc)) << t.rows << " x " << t.cols;
  }
  for (int fi : {0, 1}) {
    const auto f = fi == 0 ? fp8::Format::e4m3 : fp8::Format::e5m2;
    const int64_t k = emu::fp8_count_saturated(m.data(), int64_t(m.size()), 0.5f, fi);
    EXPECT_EQ(k, fp8::count_saturated(f, m.data(), int64_t(m.size()), 0.5f));
    if (fi == 0) EXPECT_GT(k, 0);  // the values reach past 896
  }
}

// The linear layers' FP8 GEMMs (gemm_fp8_cuda.cu) against the CPU's
// (kernels/fp8.hpp: the decoded codes' float32 GEMM): forward with a bias,
// the input gradient (the weight's transposed copy), the weight gradient
// (the input's and the gradient's transposed copies) overwritten and
// accumulated, e4m3 and e5m2 operands with their own scales, sizes that are
// not multiples of the transposes' 32 x 32 tiles. The sums run in another
// order: float32 rounding apart. And the experts' grouped forward, a scale
// a group.
// within 1e-5 of b's largest magnitude (float32 sums in another order), b not all zero
bool close(const F& a, const F& b) {
  float top = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) top = std::max(top, std::abs(b[i])), err = std::max(err, std::abs(a[i] - b[i]));
  return err <= 1e-5f * top && top > 0;
}

TEST(CudaEmulated, Fp8LinearGemmsMatchTheCpu) {
  const int64_t N = 40, C = 48, OC = 36;
  auto codes = [](int64_t n, uint32_t seed, fp8::Format f, float scale) {
    F x = randn(n, seed, 3.0f);
    std::vector<uint8_t> q(static_cast<size_t>(n));
    fp8::quantize(f, x.data(), n, scale, q.data());
    return q;
  };
  const fp8::Format e4 = fp8::Format::e4m3, e5 = fp8::Format::e5m2;
  const auto xq = codes(N * C, 1, e4, 60.f), wq = codes(OC * C, 2, e4, 140.f), gq = codes(N * OC, 3, e5, 900.f);
  const fp8::Operand8 x{xq.data(), e4, 60.f}, w{wq.data(), e4, 140.f}, g{gq.data(), e5, 900.f};
  const F bias = randn(OC, 4, 1.0f);
  F y(size_t(N * OC)), yc(y.size());
  emu::fp8_linear_forward(y.data(), xq.data(), 0, x.scale, wq.data(), 0, w.scale, bias.data(), N, C, OC);
  fp8::linear_forward8(yc.data(), x, w, bias.data(), N, C, OC);
  EXPECT_TRUE(close(y, yc)) << "forward";
  F dx(size_t(N * C)), dxc(dx.size());
  emu::fp8_linear_dgrad(dx.data(), gq.data(), 1, g.scale, wq.data(), 0, w.scale, N, C, OC);
  fp8::linear_dgrad8(dxc.data(), g, w, N, C, OC);
  EXPECT_TRUE(close(dx, dxc)) << "input gradient";
  for (bool acc : {false, true}) {
    F dw = randn(OC * C, 5, 1.0f), dwc = dw;
    emu::fp8_linear_wgrad(dw.data(), gq.data(), 1, g.scale, xq.data(), 0, x.scale, N, C, OC, acc);
    fp8::linear_wgrad8(dwc.data(), g, x, N, C, OC, acc);
    EXPECT_TRUE(close(dw, dwc)) << "weight gradient, accumulate " << acc;
  }
  // the experts' grouped forward: 3 groups of rows (one empty), each with its own scales
  const std::vector<int64_t> off = {0, 24, 24, N};
  const std::vector<float> sxs = {60.f, 11.f, 60.f}, sws = {140.f, 90.f, 35.f};
  const auto wg = codes(3 * OC * C, 6, e4, 140.f);
  F yg(size_t(N * OC)), ygc(yg.size());
  emu::fp8_grouped_linear_forward(yg.data(), xq.data(), 0, sxs.data(), wg.data(), 0, sws.data(), off.data(), 3, C, OC);
  fp8::grouped_linear_forward8(ygc.data(), xq.data(), e4, sxs.data(), wg.data(), e4, sws.data(), off.data(), 3, C, OC);
  EXPECT_TRUE(close(yg, ygc)) << "grouped forward";
}

// Blockwise: the wrappers' operands, transposes and factor layouts around
// cuBLASLt's block-scaled matmul (VEC128_32F for the 1 x 128 tiles,
// BLK128x128_32F for the weights' blocks, k-major rows padded to a multiple
// of 4), which the emulation replaces by its definition, against the CPU's
// decoded operands. C = 384 (3 tiles: the rows padded to 4), OC = 144 and
// N = 136 (partial blocks and tiles at the edges), factors spread over
// powers of two so that a factor read from the wrong tile shows.
TEST(CudaEmulated, Fp8BlockGemmsMatchTheCpu) {
  const int64_t N = 136, C = 384, OC = 144;
  struct Operand {
    std::vector<uint8_t> q;
    F factors;
    fp8::Tiled8 view() const { return {q.data(), factors.data()}; }
  };
  auto tiled = [](int64_t rows, int64_t cols, fp8::Tile t, uint32_t seed) {
    F x = randn(rows * cols, seed, 1.0f);
    for (int64_t r = 0; r < rows; ++r)  // magnitudes that differ from tile to tile
      for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] *= std::ldexp(1.0f, int((r / 37 + c / 53) % 9) - 4);
    Operand o{std::vector<uint8_t>(size_t(rows * cols)), F(size_t(fp8::tile_count(rows, cols, t)))};
    fp8::quantize_tiled(x.data(), rows, cols, t, false, o.q.data(), nullptr, o.factors.data());
    return o;
  };
  const Operand x = tiled(N, C, fp8::kRowTile, 11), w = tiled(OC, C, fp8::kSquareBlock, 12),
                g = tiled(N, OC, fp8::kRowTile, 13), xt = tiled(N, C, fp8::kColumnTile, 14),
                gt = tiled(N, OC, fp8::kColumnTile, 15);
  const F bias = randn(OC, 16, 1.0f);
  F y(size_t(N * OC)), yc(y.size());
  emu::fp8_linear_forward_blocks(y.data(), x.q.data(), x.factors.data(), w.q.data(), w.factors.data(), bias.data(), N,
                                 C, OC);
  fp8::linear_forward8b(yc.data(), x.view(), w.view(), bias.data(), N, C, OC);
  EXPECT_TRUE(close(y, yc)) << "forward";
  F dx(size_t(N * C)), dxc(dx.size());
  emu::fp8_linear_dgrad_blocks(dx.data(), g.q.data(), g.factors.data(), w.q.data(), w.factors.data(), N, C, OC);
  fp8::linear_dgrad8b(dxc.data(), g.view(), w.view(), N, C, OC);
  EXPECT_TRUE(close(dx, dxc)) << "input gradient";
  for (bool acc : {false, true}) {
    F dw = randn(OC * C, 17, 1.0f), dwc = dw;
    emu::fp8_linear_wgrad_blocks(dw.data(), gt.q.data(), gt.factors.data(), xt.q.data(), xt.factors.data(), N, C, OC,
                                 acc);
    fp8::linear_wgrad8b(dwc.data(), gt.view(), xt.view(), N, C, OC, acc);
    EXPECT_TRUE(close(dw, dwc)) << "weight gradient, accumulate " << acc;
  }
  // the CPU's decoded operands are quantize_tiled's values, bit for bit
  F yq(size_t(N * C)), yd(yq.size());
  F xs = randn(N * C, 18, 3.0f);
  std::vector<uint8_t> q(yq.size());
  F f(size_t(fp8::tile_count(N, C, fp8::kColumnTile)));
  fp8::quantize_tiled(xs.data(), N, C, fp8::kColumnTile, false, q.data(), yq.data(), f.data());
  fp8::dequantize_tiled(q.data(), N, C, fp8::kColumnTile, f.data(), yd.data());
  EXPECT_EQ(yq, yd);
}

}  // namespace
}  // namespace trident::kernels
