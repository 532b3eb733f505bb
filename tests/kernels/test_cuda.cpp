// Every CUDA kernel against its CPU twin (the same public entry point, once
// with host buffers and once with device buffers), on random shapes
// including odd sizes, with a tolerance per op; failures print the first
// elements and the largest difference. Then the device allocator's
// accounting. (Training on `device: cuda` is tests/launch/plan/test_cuda_train.)
// Without a GPU (or a CUDA build) every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <tuple>

#include "core/device_memory.hpp"
#include "core/tensor.hpp"
#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/backends.hpp"
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
#include "tests/kernels/kernel_compare.hpp"
#include "tests/kernels/require_gpu.hpp"

namespace trident::kernels {
namespace {

using F = std::vector<float>;

using test::expect_close;
F randn(int64_t n, uint32_t seed, float scale = 1.f) { return test::randn_f(n, seed, scale); }

// A device copy of host data, kept alive by the test.
struct Dev {
  Tensor t;
  explicit Dev(const F& h)
      : t(Tensor::empty({std::max<int64_t>(int64_t(h.size()), 1)}, DType::f32, MemCategory::other,
                        Device{DeviceType::cuda, 0})) {
    if (!h.empty()) copy_to_device(t.raw(), h.data(), h.size() * sizeof(float), 0);
  }
  explicit Dev(const std::vector<int32_t>& h)
      : t(Tensor::empty({int64_t(h.size())}, DType::i32, MemCategory::other, Device{DeviceType::cuda, 0})) {
    copy_to_device(t.raw(), h.data(), h.size() * sizeof(int32_t), 0);
  }
  float* f() const { return t.data<float>(); }
  int32_t* i() const { return t.data<int32_t>(); }
  F host(int64_t n) const {
    F h(static_cast<size_t>(n));
    copy_to_host(h.data(), t.raw(), h.size() * sizeof(float), 0);
    return h;
  }
};

TEST(Cuda, GemmAllTranspositionsAndOddShapes) {
  REQUIRE_GPU();
  for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{37, 53, 29}, {1, 7, 3}, {128, 64, 256}, {65, 1, 17}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        F A = randn(M * K, 1), B = randn(K * N, 2), C = randn(M * N, 3), ref = C;
        gemm<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, ref.data(), N);
        Dev dA(A), dB(B), dC(C);
        gemm<float>(ta, tb, M, N, K, 0.5f, dA.f(), lda, dB.f(), ldb, 0.25f, dC.f(), N);
        expect_close("gemm " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " ta " +
                         std::to_string(ta) + " tb " + std::to_string(tb),
                     ref, dC.host(M * N), 2e-5, 1e-5);
      }
}

TEST(Cuda, GemmBf16TensorCoresOnBf16Values) {
  REQUIRE_GPU();
  const int64_t M = 96, N = 80, K = 200;
  F A = randn(M * K, 4), B = randn(K * N, 5), ref(static_cast<size_t>(M * N));
  round_to_storage(A.data(), M * K, Precision::bf16);
  round_to_storage(B.data(), K * N, Precision::bf16);
  gemm<float>(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, ref.data(), N);
  Dev dA(A), dB(B), dC(F(static_cast<size_t>(M * N)));
  gemm<float>(false, false, M, N, K, 1.f, dA.f(), K, dB.f(), N, 0.f, dC.f(), N, Precision::bf16);
  // exact bf16 products, fp32 accumulation in another order
  expect_close("bf16 gemm", ref, dC.host(M * N), 1e-5, 1e-5);
}

TEST(Cuda, LinearForwardBackward) {
  REQUIRE_GPU();
  for (auto [N, C, OC] : std::vector<std::array<int64_t, 3>>{{33, 17, 29}, {64, 128, 96}, {5, 3, 1}})
    for (bool acc : {false, true}) {
      F x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
      F out(static_cast<size_t>(N * OC)), dx(static_cast<size_t>(N * C)), dw = randn(OC * C, 5), db = randn(OC, 6);
      Dev gx(x), gw(w), gb(b), gout(out), gdout(dout), gdx(dx), gdw(dw), gdb(db);
      linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
      linear_forward(gout.f(), gx.f(), gw.f(), gb.f(), N, C, OC);
      expect_close("linear forward", out, gout.host(N * OC), 2e-5, 1e-5);
      linear_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC, acc);
      linear_backward(gdx.f(), gdw.f(), gdb.f(), gdout.f(), gx.f(), gw.f(), N, C, OC, acc);
      expect_close("linear dinp", dx, gdx.host(N * C), 2e-5, 1e-5);
      expect_close("linear dweight", dw, gdw.host(OC * C), 2e-5, 1e-5);
      expect_close("linear dbias", db, gdb.host(OC), 2e-5, 1e-5);
    }
}

// Parameters are views at any float offset of the flat buffer: operands and
// bias 4 bytes off every larger alignment still give the CPU's result.
TEST(Cuda, LinearOnMisalignedViews) {
  REQUIRE_GPU();
  const int64_t N = 24, C = 40, OC = 36;
  F x = randn(N * C + 1, 1), w = randn(OC * C + 1, 2), b = randn(OC + 1, 3), dout = randn(N * OC + 1, 4);
  Dev gx(x), gw(w), gb(b), gdout(dout), gout(F(size_t(N * OC + 1))), gdw(F(size_t(OC * C + 1))),
      gdx(F(size_t(N * C + 1)));
  F out(static_cast<size_t>(N * OC)), dw(static_cast<size_t>(OC * C)), dx(static_cast<size_t>(N * C));
  linear_forward(out.data(), x.data() + 1, w.data() + 1, b.data() + 1, N, C, OC);
  linear_forward(gout.f() + 1, gx.f() + 1, gw.f() + 1, gb.f() + 1, N, C, OC);
  F got = gout.host(N * OC + 1);
  expect_close("linear forward, misaligned", out, F(got.begin() + 1, got.end()), 2e-5, 1e-5);
  linear_backward(dx.data(), dw.data(), static_cast<float*>(nullptr), dout.data() + 1, x.data() + 1, w.data() + 1, N, C,
                  OC, false);
  linear_backward(gdx.f() + 1, gdw.f() + 1, static_cast<float*>(nullptr), gdout.f() + 1, gx.f() + 1, gw.f() + 1, N, C,
                  OC, false);
  F gdwh = gdw.host(OC * C + 1), gdxh = gdx.host(N * C + 1);
  expect_close("linear dweight, misaligned", dw, F(gdwh.begin() + 1, gdwh.end()), 2e-5, 1e-5);
  expect_close("linear dinp, misaligned", dx, F(gdxh.begin() + 1, gdxh.end()), 2e-5, 1e-5);
}

TEST(Cuda, LayerNormAndRmsNorm) {
  REQUIRE_GPU();
  for (auto [N, C] : std::vector<std::array<int64_t, 2>>{{7, 129}, {64, 768}, {3, 5}})
    for (bool acc : {false, true}) {
      F x = randn(N * C, 1, 2.f), w = randn(C, 2), b = randn(C, 3), g = randn(N * C, 4);
      F out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
      F dx = randn(N * C, 5), dw = randn(C, 6), db = randn(C, 7);
      Dev gx(x), gw(w), gb(b), gg(g), gout(out), gmean(mean), grstd(rstd), gdx(dx), gdw(dw), gdb(db);
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
      layernorm_forward(gout.f(), gmean.f(), grstd.f(), gx.f(), gw.f(), gb.f(), N, C, 1e-5);
      expect_close("layernorm out", out, gout.host(N * C), 1e-5, 1e-5);
      expect_close("layernorm rstd", rstd, grstd.host(N), 1e-5);
      layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C,
                         acc);
      layernorm_backward(gdx.f(), gdw.f(), gdb.f(), gg.f(), gx.f(), gw.f(), gmean.f(), grstd.f(), N, C, acc);
      expect_close("layernorm dinp (accumulated)", dx, gdx.host(N * C), 1e-5, 1e-5);
      expect_close("layernorm dweight", dw, gdw.host(C), 1e-5, 1e-5);
      expect_close("layernorm dbias", db, gdb.host(C), 1e-5, 1e-5);
      F rout(static_cast<size_t>(N * C)), rdx = randn(N * C, 8), rdw = randn(C, 9);
      Dev grout(rout), grdx(rdx), grdw(rdw);
      rmsnorm_forward(rout.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
      rmsnorm_forward(grout.f(), grstd.f(), gx.f(), gw.f(), N, C, 1e-6);
      expect_close("rmsnorm out", rout, grout.host(N * C), 1e-5, 1e-5);
      rmsnorm_backward(rdx.data(), rdw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, acc);
      rmsnorm_backward(grdx.f(), grdw.f(), gg.f(), gx.f(), gw.f(), grstd.f(), N, C, acc);
      expect_close("rmsnorm dinp", rdx, grdx.host(N * C), 1e-5, 1e-5);
      expect_close("rmsnorm dweight", rdw, grdw.host(C), 1e-5, 1e-5);
    }
}

TEST(Cuda, GeluAndSwiglu) {
  REQUIRE_GPU();
  const int64_t n = 1001, N = 5, Fh = 67;
  F x = randn(n, 1, 3.f), g = randn(n, 2), out(n), dx(n);
  Dev gx(x), gg(g), gout(out), gdx(dx);
  gelu_forward(out.data(), x.data(), n);
  gelu_forward(gout.f(), gx.f(), n);
  expect_close("gelu", out, gout.host(n), 2e-6, 1e-6);
  gelu_backward(dx.data(), x.data(), g.data(), n);
  gelu_backward(gdx.f(), gx.f(), gg.f(), n);
  expect_close("gelu backward", dx, gdx.host(n), 2e-6, 1e-6);
  F in = randn(N * 2 * Fh, 3, 2.f), d = randn(N * Fh, 4), so(N * Fh), sd(N * 2 * Fh);
  Dev gin(in), gd(d), gso(so), gsd(sd);
  swiglu_forward(so.data(), in.data(), N, Fh);
  swiglu_forward(gso.f(), gin.f(), N, Fh);
  expect_close("swiglu", so, gso.host(N * Fh), 2e-6, 1e-6);
  swiglu_backward(sd.data(), in.data(), d.data(), N, Fh);
  swiglu_backward(gsd.f(), gin.f(), gd.f(), N, Fh);
  expect_close("swiglu backward", sd, gsd.host(N * 2 * Fh), 2e-6, 1e-6);
}

TEST(Cuda, FlashAttentionMatchesMaterialisedSoftmax) {
  REQUIRE_GPU();
  struct Shape {
    int64_t B, T, H, KV, D, Dv;
  };
  // the last two: value heads of their own size (multi-head latent attention's 192 and 128)
  for (Shape s :
       {Shape{2, 67, 4, 2, 16, 16}, Shape{1, 130, 2, 1, 64, 64}, Shape{1, 64, 2, 2, 128, 128}, Shape{2, 5, 3, 3, 7, 7},
        Shape{1, 200, 4, 4, 96, 96}, Shape{1, 130, 4, 4, 192, 128}, Shape{2, 67, 2, 1, 24, 40}}) {
    const int64_t W = attention_qkv_width(s.H, s.KV, s.D, s.Dv), N = s.B * s.T;
    const std::string name = "attention B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" +
                             std::to_string(s.H) + " KV" + std::to_string(s.KV) + " D" + std::to_string(s.D) + " Dv" +
                             std::to_string(s.Dv);
    F qkv = randn(N * W, 1), dout = randn(N * s.H * s.Dv, 2), out(N * s.H * s.Dv);
    F cpu_lse(static_cast<size_t>(attention_state_elements(s.B, s.T, s.H))), dqkv(N * W);
    attention_forward(out.data(), cpu_lse.data(), qkv.data(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), cpu_lse.data(), s.B, s.T, s.H, s.KV, s.D,
                       s.Dv);
    const int64_t state = attention_state_elements(s.B, s.T, s.H);
    ASSERT_EQ(state, s.B * s.H * s.T) << "no T x T state on the device";
    Dev gqkv(qkv), gdout(dout), gout(F(out.size())), glse(F(static_cast<size_t>(state))), gdqkv(F(dqkv.size()));
    attention_forward(gout.f(), glse.f(), gqkv.f(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    expect_close(name + " output", out, gout.host(int64_t(out.size())), 1e-5, 1e-5);
    F lse = glse.host(state), lse2(static_cast<size_t>(state));
    Dev glse2(lse2);
    attention_lse(glse2.f(), gqkv.f(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    expect_close(name + " attention_lse (recompute) = forward's lse", lse, glse2.host(state), 0, 0);
    expect_close(name + " lse against the CPU twin's", cpu_lse, lse, 1e-5, 1e-5);
    attention_backward(gdqkv.f(), gdout.f(), gqkv.f(), gout.f(), glse.f(), s.B, s.T, s.H, s.KV, s.D, s.Dv);
    expect_close(name + " dqkv", dqkv, gdqkv.host(int64_t(dqkv.size())), 1e-4, 1e-5);
  }
}

// Attention blocks (context parallelism) on the GPU against the CPU twin:
// rank 1 of 3 (two 40-row chunks) attends to every rank's block, merged by
// log-sum-exp, with documents; backward adds each block's dq, dk, dv.
TEST(Cuda, AttentionBlocksMatchTheCpu) {
  REQUIRE_GPU();
  const int64_t B = 2, N = 3, c = 40, T = 2 * N * c, Tl = 2 * c, H = 4, KV = 2, D = 64, W = (H + 2 * KV) * D;
  std::vector<std::vector<int32_t>> pos(N);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t chunk : {r, 2 * N - 1 - r})
      for (int64_t t = chunk * c; t < (chunk + 1) * c; ++t) pos[size_t(r)].push_back(int32_t(t));
  const std::vector<int32_t> whole = test::doc_starts(B, T, {{0, 30, 95, 96, 170}, {0, 130}});
  std::vector<int32_t> ds;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t p : pos[1]) ds.push_back(whole[size_t(b * T + p)]);
  std::vector<F> qkv;
  std::vector<std::unique_ptr<Dev>> gqkv;
  std::vector<std::unique_ptr<Dev>> gpos;
  for (int64_t r = 0; r < N; ++r) {
    qkv.push_back(randn(B * Tl * W, uint32_t(40 + r)));
    gqkv.push_back(std::make_unique<Dev>(qkv.back()));
    gpos.push_back(std::make_unique<Dev>(pos[size_t(r)]));
  }
  const Dev gds(ds);
  const F dout = randn(B * Tl * H * D, 50);
  const Dev gdout(dout);
  auto block = [&](int64_t src, bool device) {
    AttentionBlock<float> a;
    a.B = B, a.Tq = Tl, a.Tk = Tl, a.H = H, a.KV = KV, a.D = a.Dv = D, a.ldq = W, a.ldkv = W;
    const float* q = device ? gqkv[1]->f() : qkv[1].data();
    const float* kv = device ? gqkv[size_t(src)]->f() : qkv[size_t(src)].data();
    a.q = q, a.k = kv + H * D, a.v = kv + (H + KV) * D;
    a.q_pos = device ? gpos[1]->i() : pos[1].data(),
    a.k_pos = device ? gpos[size_t(src)]->i() : pos[size_t(src)].data();
    a.doc_start = device ? gds.i() : ds.data();
    return a;
  };
  F out(size_t(B * Tl * H * D)), lse(size_t(B * H * Tl));
  Dev gout(out), glse(lse);
  for (int64_t step = 0; step < N; ++step) {
    const int64_t src = (1 - step + N) % N;
    attention_block_forward(out.data(), H * D, lse.data(), block(src, false), step > 0);
    attention_block_forward(gout.f(), H * D, glse.f(), block(src, true), step > 0);
  }
  expect_close("block output", out, gout.host(int64_t(out.size())), 1e-5, 1e-5);
  expect_close("block lse", lse, glse.host(int64_t(lse.size())), 1e-5, 1e-5);
  F delta(lse.size());
  Dev gdelta(delta);
  attention_delta(delta.data(), dout.data(), out.data(), H * D, B, Tl, H, D);
  attention_delta(gdelta.f(), gdout.f(), gout.f(), H * D, B, Tl, H, D);
  expect_close("block delta", delta, gdelta.host(int64_t(delta.size())), 1e-5, 1e-5);
  for (int64_t src = 0; src < N; ++src) {
    F dq(qkv[1].size(), 0.f), dkv(qkv[1].size(), 0.f);
    Dev gdq(dq), gdkv(dkv);
    attention_block_backward(dq.data(), W, dkv.data() + H * D, dkv.data() + (H + KV) * D, W, dout.data(), H * D,
                             lse.data(), delta.data(), block(src, false));
    attention_block_backward(gdq.f(), W, gdkv.f() + H * D, gdkv.f() + (H + KV) * D, W, gdout.f(), H * D, glse.f(),
                             gdelta.f(), block(src, true));
    expect_close("block dq from block " + std::to_string(src), dq, gdq.host(int64_t(dq.size())), 1e-4, 1e-5);
    expect_close("block dk, dv of block " + std::to_string(src), dkv, gdkv.host(int64_t(dkv.size())), 1e-4, 1e-5);
  }
}

// Document masking on the GPU against the CPU twin: attention (masked
// within and across 64-key tiles), rotary and learned positions.
TEST(Cuda, DocumentMaskedAttentionRotaryAndPositions) {
  REQUIRE_GPU();
  const int64_t B = 2, T = 150, H = 4, KV = 2, D = 16, W = (H + 2 * KV) * D, N = B * T, C = 9;
  const std::vector<int32_t> ds = test::doc_starts(B, T, {{0, 3, 64, 65, 100, 149}, {0, 70}});
  Dev gds(ds);
  const auto table = rope_table(T, D, 10000.0);
  F qkv = randn(N * W, 21), dout = randn(N * H * D, 22);
  Dev gqkv(qkv), gdout(dout);
  rope_forward(qkv.data(), table.data(), B, T, H, KV, D, ds.data());
  rope_forward(gqkv.f(), table.data(), B, T, H, KV, D, gds.i());
  expect_close("masked rope forward", qkv, gqkv.host(N * W), 1e-6, 1e-6);
  F out(N * H * D), cpu_lse(static_cast<size_t>(B * H * T)), dqkv(N * W);
  attention_forward(out.data(), cpu_lse.data(), qkv.data(), B, T, H, KV, D, D, ds.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), cpu_lse.data(), B, T, H, KV, D, D, ds.data());
  Dev gout(F(out.size())), glse(F(static_cast<size_t>(B * H * T))), gdqkv(F(dqkv.size()));
  attention_forward(gout.f(), glse.f(), gqkv.f(), B, T, H, KV, D, D, gds.i());
  expect_close("masked attention output", out, gout.host(N * H * D), 1e-5, 1e-5);
  attention_backward(gdqkv.f(), gdout.f(), gqkv.f(), gout.f(), glse.f(), B, T, H, KV, D, D, gds.i());
  expect_close("masked attention dqkv", dqkv, gdqkv.host(N * W), 1e-4, 1e-5);
  const int64_t row0 = 40, rows = 200;
  F wpe = randn(T * C, 23), pin = randn(rows * C, 24), p1(rows * C), dp1 = randn(T * C, 25);
  Dev gwpe(wpe), gpin(pin), gp(F(p1.size())), gdp(dp1);
  position_forward(p1.data(), pin.data(), wpe.data(), row0, rows, T, C, ds.data());
  position_forward(gp.f(), gpin.f(), gwpe.f(), row0, rows, T, C, gds.i());
  expect_close("masked position forward", p1, gp.host(rows * C), 0, 0);
  position_backward(dp1.data(), pin.data(), row0, rows, T, C, ds.data());
  position_backward(gdp.f(), gpin.f(), row0, rows, T, C, gds.i());
  expect_close("masked position backward", dp1, gdp.host(T * C), 1e-6, 1e-6);
}

TEST(Cuda, RotaryForwardBackward) {
  REQUIRE_GPU();
  const int64_t B = 2, T = 9, H = 3, KV = 1, D = 6, W = (H + 2 * KV) * D;
  const auto table = rope_table(T, D, 10000.0);
  F x = randn(B * T * W, 1), y = x;
  Dev gx(x);
  rope_forward(y.data(), table.data(), B, T, H, KV, D);
  rope_forward(gx.f(), table.data(), B, T, H, KV, D);
  expect_close("rope forward", y, gx.host(B * T * W), 1e-6, 1e-6);
  rope_backward(y.data(), table.data(), B, T, H, KV, D);
  rope_backward(gx.f(), table.data(), B, T, H, KV, D);
  expect_close("rope backward", y, gx.host(B * T * W), 1e-6, 1e-6);
  expect_close("rope round trip", x, y, 1e-5, 1e-6);
}

TEST(Cuda, EmbeddingsOverAVocabularyRange) {
  REQUIRE_GPU();
  const int64_t N = 37, C = 13, V = 11, vb = 5, T = 8, row0 = 3, rows = 21;
  std::vector<int32_t> tok(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tok[size_t(i)] = int32_t((i * 7) % 20);  // some outside [vb, vb + V)
  F wte = randn(V * C, 1), out(N * C), dout = randn(N * C, 2), dwte = randn(V * C, 3);
  Dev gtok(tok), gwte(wte), gout(out), gdout(dout), gdwte(dwte);
  embedding_forward(out.data(), tok.data(), wte.data(), N, C, vb, V);
  embedding_forward(gout.f(), gtok.i(), gwte.f(), N, C, vb, V);
  expect_close("embedding forward", out, gout.host(N * C), 0, 0);
  embedding_backward(dwte.data(), dout.data(), tok.data(), N, C, vb, V);
  embedding_backward(gdwte.f(), gdout.f(), gtok.i(), N, C, vb, V);
  expect_close("embedding backward (scatter-add)", dwte, gdwte.host(V * C), 1e-6, 1e-6);
  F wpe = randn(T * C, 4), inp = randn(rows * C, 5), pout(rows * C), dwpe = randn(T * C, 6);
  Dev gwpe(wpe), ginp(inp), gpout(pout), gdwpe(dwpe);
  position_forward(pout.data(), inp.data(), wpe.data(), row0, rows, T, C);
  position_forward(gpout.f(), ginp.f(), gwpe.f(), row0, rows, T, C);
  expect_close("position forward", pout, gpout.host(rows * C), 0, 0);
  position_backward(dwpe.data(), inp.data(), row0, rows, T, C);
  position_backward(gdwpe.f(), ginp.f(), row0, rows, T, C);
  expect_close("position backward", dwpe, gdwpe.host(T * C), 1e-6, 1e-6);
}

// The MoE layer's device path: the routes' permutation equals the CPU's
// exactly; the gather, the experts' grouped GEMMs both ways (experts without
// rows: zeroed, then accumulated weight gradients), the combine and their
// backwards match the CPU.
TEST(Cuda, MoePermutationAndGroupedLinear) {
  REQUIRE_GPU();
  const int64_t N = 300, K = 2, E = 8, C = 40, OC = 24, M = N * K;
  const std::vector<int32_t> expert = test::moe_routes(N, K, E, 7);
  std::vector<int32_t> row(static_cast<size_t>(M)), token(row.size());
  std::vector<int64_t> off(static_cast<size_t>(E + 1)), goff(off.size(), -1);
  moe_route_index(row.data(), token.data(), off.data(), expert.data(), N, K, E);
  Dev gexpert(expert), grow(row), gtoken(token);  // row and token overwritten below
  moe_route_index(grow.i(), gtoken.i(), goff.data(), gexpert.i(), N, K, E);
  std::vector<int32_t> hrow(row.size()), htoken(row.size());
  copy_to_host(hrow.data(), grow.t.raw(), hrow.size() * sizeof(int32_t), 0);
  copy_to_host(htoken.data(), gtoken.t.raw(), htoken.size() * sizeof(int32_t), 0);
  EXPECT_EQ(row, hrow);
  EXPECT_EQ(token, htoken);
  EXPECT_EQ(off, goff);
  F h = randn(N * C, 1), x(M * C);
  Dev gh(h), gx(x);
  moe_permute(x.data(), h.data(), token.data(), M, C), moe_permute(gx.f(), gh.f(), gtoken.i(), M, C);
  expect_close("moe permute", x, gx.host(M * C), 0, 0);
  F w = randn(E * OC * C, 2, 0.2f), y(M * OC), dy = randn(M * OC, 3), dx(M * C), dw = randn(E * OC * C, 4);
  Dev gw(w), gy(y), gdy(dy), gdx(dx), gdw(dw);
  grouped_linear_forward(y.data(), x.data(), w.data(), off.data(), E, C, OC);
  grouped_linear_forward(gy.f(), gx.f(), gw.f(), off.data(), E, C, OC);
  expect_close("grouped linear forward", y, gy.host(M * OC), 2e-5, 1e-5);
  for (bool acc : {false, true}) {
    grouped_linear_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), off.data(), E, C, OC, acc);
    grouped_linear_backward(gdx.f(), gdw.f(), gdy.f(), gx.f(), gw.f(), off.data(), E, C, OC, acc);
    expect_close("grouped linear dx", dx, gdx.host(M * C), 2e-5, 1e-5);
    expect_close(std::string("grouped linear dw, accumulate ") + (acc ? "on" : "off"), dw, gdw.host(E * OC * C), 2e-5,
                 1e-5);
  }
  F yc = randn(M * C, 5), wt = randn(M, 6), out(N * C), dout = randn(N * C, 7), dys(M * C), dwt(M), dh(N * C);
  Dev gyc(yc), gwt(wt), gout(out), gdout(dout), gdys(dys), gdwt(dwt), gdh(dh);
  moe_combine(out.data(), yc.data(), wt.data(), row.data(), N, K, C);
  moe_combine(gout.f(), gyc.f(), gwt.f(), grow.i(), N, K, C);
  expect_close("moe combine", out, gout.host(N * C), 1e-6, 1e-6);
  moe_combine_backward(dys.data(), dwt.data(), dout.data(), yc.data(), wt.data(), row.data(), N, K, C);
  moe_combine_backward(gdys.f(), gdwt.f(), gdout.f(), gyc.f(), gwt.f(), grow.i(), N, K, C);
  expect_close("moe combine backward (rows)", dys, gdys.host(M * C), 0, 0);
  expect_close("moe combine backward (weights)", dwt, gdwt.host(M), 1e-5, 1e-5);
  moe_unpermute(dh.data(), yc.data(), row.data(), N, K, C);
  moe_unpermute(gdh.f(), gyc.f(), grow.i(), N, K, C);
  expect_close("moe unpermute", dh, gdh.host(N * C), 0, 0);
}

TEST(Cuda, CrossEntropyFusedAndVocabParallel) {
  REQUIRE_GPU();
  const int64_t N = 13, V = 70, Vvalid = 67;
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tgt[size_t(i)] = int32_t((i * 11) % Vvalid);
  F logits = randn(N * V, 1, 3.f), losses(N), l2 = logits;
  Dev gl(logits), glosses(losses), gtgt(tgt);
  softmax_cross_entropy(losses.data(), l2.data(), tgt.data(), N, V, Vvalid, LossGrad<float>::scaled(0.5f));
  softmax_cross_entropy(glosses.f(), gl.f(), gtgt.i(), N, V, Vvalid, LossGrad<float>::scaled(0.5f));
  expect_close("cross-entropy losses", losses, glosses.host(N), 1e-5, 1e-6);
  expect_close("cross-entropy dlogits", l2, gl.host(N * V), 1e-5, 1e-7);
  // vocab-parallel passes over columns [30, 70) of the vocabulary (this rank's 40)
  const int64_t vb = 30, Vl = 40, Vlvalid = Vvalid - vb;
  F part(static_cast<size_t>(N * Vl));
  for (int64_t n = 0; n < N; ++n) std::copy_n(logits.begin() + n * V + vb, Vl, part.begin() + n * Vl);
  F mx(N), sums(2 * N), pl(N), part_cpu = part;
  Dev gpart(part), gmx(mx), gsums(sums), gpl(pl);
  cross_entropy_local_max(mx.data(), part_cpu.data(), N, Vl, Vlvalid);
  cross_entropy_local_max(gmx.f(), gpart.f(), N, Vl, Vlvalid);
  expect_close("local max", mx, gmx.host(N), 0, 0);
  cross_entropy_local_sums(sums.data(), part_cpu.data(), mx.data(), tgt.data(), N, Vl, Vlvalid, vb);
  cross_entropy_local_sums(gsums.f(), gpart.f(), gmx.f(), gtgt.i(), N, Vl, Vlvalid, vb);
  expect_close("local sums", sums, gsums.host(2 * N), 1e-5, 1e-6);
  cross_entropy_finish(pl.data(), part_cpu.data(), mx.data(), sums.data(), tgt.data(), N, Vl, Vlvalid, vb,
                       LossGrad<float>::scaled(0.25f));
  cross_entropy_finish(gpl.f(), gpart.f(), gmx.f(), gsums.f(), gtgt.i(), N, Vl, Vlvalid, vb,
                       LossGrad<float>::scaled(0.25f));
  expect_close("finish losses", pl, gpl.host(N), 1e-5, 1e-6);
  expect_close("finish dlogits", part_cpu, gpart.host(N * Vl), 1e-5, 1e-7);
}

TEST(Cuda, ResidualAndBiasGradient) {
  REQUIRE_GPU();
  const int64_t N = 19, C = 23;
  F a = randn(N * C, 1), b = randn(N * C, 2), bias = randn(C, 3), out(N * C), db = randn(C, 4);
  Dev ga(a), gb(b), gbias(bias), gout(out), gdb(db);
  residual_forward(out.data(), a.data(), b.data(), bias.data(), N, C);
  residual_forward(gout.f(), ga.f(), gb.f(), gbias.f(), N, C);
  expect_close("residual", out, gout.host(N * C), 1e-6, 1e-6);
  for (bool acc : {true, false}) {
    bias_backward(db.data(), a.data(), N, C, acc);
    bias_backward(gdb.f(), ga.f(), N, C, acc);
    expect_close("bias gradient", db, gdb.host(C), 1e-6, 1e-6);
  }
}

TEST(Cuda, MultiTensorAdamW) {
  REQUIRE_GPU();
  const int64_t n = 200003;  // several 64K chunks, an odd tail
  F p = randn(n, 1), m = randn(n, 2, 0.1f), v = randn(n, 3, 0.1f), g = randn(n, 4);
  for (auto& x : v) x = std::abs(x);
  const std::vector<AdamWRange> ranges = {{0, 70000, 0.1}, {70000, 17, 0.0}, {70017, n - 70017, 0.05}};
  const AdamWParams hp{3e-3, 0.9, 0.95, 1e-8, 0.0, 7, 0.5};
  Dev gp(p), gm(m), gv(v), gg(g);
  adamw_update_multi(p.data(), m.data(), v.data(), g.data(), ranges, hp);
  adamw_update_multi(gp.f(), gm.f(), gv.f(), gg.f(), ranges, hp);
  expect_close("adamw params", p, gp.host(n), 1e-6, 1e-7);
  expect_close("adamw m", m, gm.host(n), 1e-6, 1e-8);
  expect_close("adamw v", v, gv.host(n), 1e-6, 1e-8);
}

// The MoE layer's row ops, QK-norm's head moves and the correction bias's
// step on the device against the CPU (test_cuda_emulated: the same kernels'
// logic on the CPU).
TEST(Cuda, MoeRowsHeadsAndBiasStep) {
  REQUIRE_GPU();
  const int64_t N = 300, C = 70;
  const F x = randn(N * C, 41), y = randn(N * C, 42), g = randn(N, 43), base = randn(N * C, 44);
  Dev gx(x), gy(y), gg(g), gout(base), gsc{F(size_t(N * C))}, gd{F(size_t(N))};
  F out = base, sc(N * C), d(N);
  rows_scale_add(out.data(), x.data(), g.data(), N, C), rows_scale_add(gout.f(), gx.f(), gg.f(), N, C);
  expect_close("rows scale_add", out, gout.host(N * C), 1e-6, 1e-6);
  rows_scale(sc.data(), x.data(), g.data(), N, C), rows_scale(gsc.f(), gx.f(), gg.f(), N, C);
  expect_close("rows scale", sc, gsc.host(N * C), 0, 0);
  rows_dot(d.data(), x.data(), y.data(), N, C), rows_dot(gd.f(), gx.f(), gy.f(), N, C);
  expect_close("rows dot", d, gd.host(N), 1e-5, 1e-5);
  const int64_t H = 4, KV = 2, D = 16, W = (H + 2 * KV) * D, rows = N * (H + KV) * D;
  const F qkv = randn(N * W, 45);
  Dev gqkv(qkv), gheads{F(size_t(rows))};
  F heads(rows), back(qkv);
  heads_gather(heads.data(), qkv.data(), N, H, KV, D, W), heads_gather(gheads.f(), gqkv.f(), N, H, KV, D, W);
  expect_close("heads gather", heads, gheads.host(rows), 0, 0);
  for (auto& v : heads) v *= 2;
  Dev gheads2(heads);
  heads_scatter(back.data(), heads.data(), N, H, KV, D, W), heads_scatter(gqkv.f(), gheads2.f(), N, H, KV, D, W);
  expect_close("heads scatter", back, gqkv.host(N * W), 0, 0);
  const F counts = {3, 5, 4, 4, 0, 9, 4};
  F bias = randn(int64_t(counts.size()), 47);
  Dev gbias(bias), gcounts(counts);
  bias_sign_update(bias.data(), counts.data(), int64_t(counts.size()), 1e-3, 4.0);
  bias_sign_update(gbias.f(), gcounts.f(), int64_t(counts.size()), 1e-3, 4.0);
  expect_close("bias sign step", bias, gbias.host(int64_t(counts.size())), 0, 0);
}

TEST(Cuda, RoundingCountsAndSums) {
  REQUIRE_GPU();
  const int64_t n = 70001;
  F x = randn(n, 1, 1000.f);
  x[5] = 1e6f, x[6] = 1e-30f;
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    F h = x;
    Dev g(x);
    round_to_storage(h.data(), n, p);
    round_to_storage(g.f(), n, p);
    F got = g.host(n);
    EXPECT_TRUE(std::equal(h.begin(), h.end(), got.begin(),
                           [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }))
        << precision_name(p) << " rounding differs from the CPU's";
    EXPECT_EQ(count_nonfinite(got.data(), n), count_nonfinite(g.f(), n));
  }
  Dev g(x);
  EXPECT_NEAR(sum(g.f(), n), sum(x.data(), n), 1e-9 * n * 1000);
  const std::vector<std::pair<int64_t, int64_t>> r = {{0, 100}, {200, 70001}};
  EXPECT_NEAR(sum_of_squares_ranges(g.f(), r) / sum_of_squares_ranges(x.data(), r), 1.0, 1e-12);
  fill_zero(g.f(), n);
  EXPECT_EQ(sum(g.f(), n), 0.0);
}

// FP8 on the GPU (kernels/cuda/fp8_cuda.cu) gives the CPU code's bits:
// tensorwise fake quantisation in both formats (values past each format's
// largest, subnormals), the amax, 1 x 128 tiles and 128 x 128 blocks.
TEST(Cuda, Fp8MatchesTheCpu) {
  REQUIRE_GPU();
  F x = randn(128 * 128, 9, 40.f);
  x[3] = 1e6f, x[4] = -1e-40f, x[5] = 500.f, x[6] = 6e4f;
  const int64_t n = int64_t(x.size());
  Dev d(x);
  EXPECT_EQ(fp8::amax(d.f(), n), fp8::amax(x.data(), n));
  auto same = [](const F& a, const F& b) { return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0; };
  for (fp8::Format f : {fp8::Format::e4m3, fp8::Format::e5m2}) {
    F want(x.size());
    Dev y(F(x.size()));
    fp8::fake_quantize(f, x.data(), n, 3.5f, want.data());
    fp8::fake_quantize(f, d.f(), n, 3.5f, y.f());
    EXPECT_TRUE(same(y.host(n), want)) << "tensorwise, format " << int(f);
  }
  for (bool pow2 : {false, true}) {
    F want(x.size());
    Dev y(F(x.size()));
    fp8::fake_quantize_tiles(x.data(), 128, 128, pow2, want.data());
    fp8::fake_quantize_tiles(d.f(), 128, 128, pow2, y.f());
    EXPECT_TRUE(same(y.host(n), want)) << "tiles, pow2 " << pow2;
    fp8::fake_quantize_blocks(x.data(), 128, 128, pow2, want.data());
    fp8::fake_quantize_blocks(d.f(), 128, 128, pow2, y.f());
    EXPECT_TRUE(same(y.host(n), want)) << "blocks, pow2 " << pow2;
  }
}

// The linear layers' FP8 GEMMs on the device (cuBLASLt's FP8 matmul where
// the shapes are multiples of 16 on sm_89+, else the decoded operands'
// float32 GEMM) against the CPU's (the decoded codes' float32 GEMM):
// forward with a bias, the input gradient (the weight transposed on the
// device) and the weight gradient overwritten and accumulated, e4m3 times
// e4m3 and e5m2 gradients. FP8 tensor cores accumulate in their own order
// and precision: 2e-3 of the largest value.
TEST(Cuda, Fp8GemmsMatchTheCpu) {
  REQUIRE_GPU();
  namespace f8 = kernels::fp8;
  for (const auto& [N, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{256, 512, 384}, {40, 48, 36}}) {
    auto operand = [&](int64_t n, uint32_t seed, f8::Format f, std::vector<uint8_t>& host, Tensor& dev) {
      const F x = randn(n, seed, 2.f);
      const float scale = f8::tensorwise_scale(f, f8::amax(x.data(), n));
      host.resize(size_t(n));
      f8::quantize(f, x.data(), n, scale, host.data());
      dev = Tensor::empty({n}, DType::u8, MemCategory::other, Device{DeviceType::cuda, 0});
      copy_to_device(dev.raw(), host.data(), size_t(n), 0);
      return scale;
    };
    std::vector<uint8_t> xh, wh, gh;
    Tensor xd, wd, gd;
    const float sx = operand(N * C, 1, f8::Format::e4m3, xh, xd), sw = operand(OC * C, 2, f8::Format::e4m3, wh, wd);
    const float sg = operand(N * OC, 3, f8::Format::e5m2, gh, gd);
    const f8::Operand8 x{xh.data(), f8::Format::e4m3, sx}, w{wh.data(), f8::Format::e4m3, sw},
        g{gh.data(), f8::Format::e5m2, sg};
    const f8::Operand8 xg{xd.data<uint8_t>(), x.format, sx}, wg{wd.data<uint8_t>(), w.format, sw},
        gg{gd.data<uint8_t>(), g.format, sg};
    auto close = [](const F& got, const F& want, const char* what) {
      float top = 0, err = 0;
      for (size_t i = 0; i < want.size(); ++i)
        top = std::max(top, std::abs(want[i])), err = std::max(err, std::abs(got[i] - want[i]));
      EXPECT_LE(err, 2e-3f * top) << what << ": largest " << top;
    };
    const F bias = randn(OC, 4, 1.f);
    Dev b(bias), y(F(size_t(N * OC))), dx(F(size_t(N * C)));
    F yc(size_t(N * OC)), dxc(size_t(N * C));
    f8::linear_forward8(y.f(), xg, wg, b.f(), N, C, OC);
    f8::linear_forward8(yc.data(), x, w, bias.data(), N, C, OC);
    close(y.host(N * OC), yc, "forward");
    f8::linear_dgrad8(dx.f(), gg, wg, N, C, OC);
    f8::linear_dgrad8(dxc.data(), g, w, N, C, OC);
    close(dx.host(N * C), dxc, "input gradient");
    for (bool acc : {false, true}) {
      F dwc = randn(OC * C, 5, 1.f);
      Dev dw(dwc);
      f8::linear_wgrad8(dw.f(), gg, xg, N, C, OC, acc);
      f8::linear_wgrad8(dwc.data(), g, x, N, C, OC, acc);
      close(dw.host(OC * C), dwc, acc ? "weight gradient, accumulated" : "weight gradient");
    }
  }
}

// Blockwise: cuBLASLt's block-scaled FP8 GEMMs (Hopper) or the decoded
// tiles' float32 GEMM elsewhere, against the CPU's decoded operands; 384
// wide (3 tiles: the blocks' factor rows padded to 4) and shapes that do not
// fit cuBLASLt (the fallback).
TEST(Cuda, Fp8BlockGemmsMatchTheCpu) {
  REQUIRE_GPU();
  namespace f8 = kernels::fp8;
  for (const auto& [N, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{256, 384, 512}, {40, 48, 36}}) {
    struct Operand {
      std::vector<uint8_t> q;
      F f;
      Tensor qd, fd;
      f8::Tiled8 host() const { return {q.data(), f.data()}; }
      f8::Tiled8 dev() const { return {qd.data<uint8_t>(), fd.data<float>()}; }
    };
    auto operand = [](int64_t rows, int64_t cols, f8::Tile t, uint32_t seed) {
      const F x = randn(rows * cols, seed, 2.f);
      Operand o{std::vector<uint8_t>(size_t(rows * cols)), F(size_t(f8::tile_count(rows, cols, t))), {}, {}};
      f8::quantize_tiled(x.data(), rows, cols, t, false, o.q.data(), nullptr, o.f.data());
      const Device gpu{DeviceType::cuda, 0};
      o.qd = Tensor::empty({rows * cols}, DType::u8, MemCategory::other, gpu);
      o.fd = Tensor::empty({int64_t(o.f.size())}, DType::f32, MemCategory::other, gpu);
      copy_to_device(o.qd.raw(), o.q.data(), o.q.size(), 0);
      copy_to_device(o.fd.raw(), o.f.data(), o.f.size() * sizeof(float), 0);
      return o;
    };
    const Operand x = operand(N, C, f8::kRowTile, 1), w = operand(OC, C, f8::kSquareBlock, 2),
                  g = operand(N, OC, f8::kRowTile, 3), xt = operand(N, C, f8::kColumnTile, 4),
                  gt = operand(N, OC, f8::kColumnTile, 5);
    auto close = [](const F& got, const F& want, const char* what) {
      float top = 0, err = 0;
      for (size_t i = 0; i < want.size(); ++i)
        top = std::max(top, std::abs(want[i])), err = std::max(err, std::abs(got[i] - want[i]));
      EXPECT_LE(err, 2e-3f * top) << what << ": largest " << top;
    };
    const F bias = randn(OC, 6, 1.f);
    Dev b(bias), y(F(size_t(N * OC))), dx(F(size_t(N * C)));
    F yc(size_t(N * OC)), dxc(size_t(N * C));
    f8::linear_forward8b(y.f(), x.dev(), w.dev(), b.f(), N, C, OC);
    f8::linear_forward8b(yc.data(), x.host(), w.host(), bias.data(), N, C, OC);
    close(y.host(N * OC), yc, "forward");
    f8::linear_dgrad8b(dx.f(), g.dev(), w.dev(), N, C, OC);
    f8::linear_dgrad8b(dxc.data(), g.host(), w.host(), N, C, OC);
    close(dx.host(N * C), dxc, "input gradient");
    for (bool acc : {false, true}) {
      F dwc = randn(OC * C, 7, 1.f);
      Dev dw(dwc);
      f8::linear_wgrad8b(dw.f(), gt.dev(), xt.dev(), N, C, OC, acc);
      f8::linear_wgrad8b(dwc.data(), gt.host(), xt.host(), N, C, OC, acc);
      close(dw.host(OC * C), dwc, acc ? "weight gradient, accumulated" : "weight gradient");
    }
  }
}

TEST(Cuda, CachingAllocatorAccountsPerCategory) {
  REQUIRE_GPU();
  device_empty_cache();
  const MemStats before = device_memory_stats();
  const int64_t reserved0 = device_reserved_bytes();
  {
    Tensor a = Tensor::empty({1000}, DType::f32, MemCategory::grads, Device{DeviceType::cuda, 0});
    Tensor b = Tensor::zeros({3 << 20}, DType::f32, MemCategory::activations, Device{DeviceType::cuda, 0});
    const MemStats s = device_memory_stats();
    EXPECT_EQ(s.current[size_t(MemCategory::grads)] - before.current[size_t(MemCategory::grads)], 4000);
    EXPECT_EQ(s.current[size_t(MemCategory::activations)] - before.current[size_t(MemCategory::activations)],
              int64_t(12) << 20);
    EXPECT_TRUE(is_device_pointer(b.data<float>() + 12345));
    EXPECT_FALSE(is_device_pointer(&before));
    EXPECT_EQ(Tensor::borrow(b.data<float>(), 10).device().type, DeviceType::cuda);
    EXPECT_EQ(sum(b.data<float>(), b.numel()), 0.0);
  }
  const int64_t reserved1 = device_reserved_bytes();
  EXPECT_GT(reserved1, reserved0);
  {  // the same sizes again: served from the cache
    Tensor a = Tensor::empty({1000}, DType::f32, MemCategory::grads, Device{DeviceType::cuda, 0});
    Tensor b = Tensor::empty({3 << 20}, DType::f32, MemCategory::activations, Device{DeviceType::cuda, 0});
    EXPECT_EQ(device_reserved_bytes(), reserved1);
  }
  const MemStats after = device_memory_stats();
  EXPECT_EQ(after.total_current, before.total_current);
  EXPECT_GE(after.peak[size_t(MemCategory::activations)], int64_t(12) << 20);
  device_empty_cache();
  EXPECT_EQ(device_reserved_bytes(), reserved0);
}

}  // namespace
}  // namespace trident::kernels
