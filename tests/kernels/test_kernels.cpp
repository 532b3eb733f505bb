// Every CPU kernel's backward against a double-precision finite-difference
// gradient of L = <forward output, R> for a random R, on odd sizes; AdamW
// against the textbook update; float kernels against the double ones.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cpu/vmath.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "tests/kernels/kernel_compare.hpp"
#include "tests/test_util.hpp"

namespace trident::kernels {
using test::dot;
using test::expect_fd_gradient;
using test::randn;
using V = std::vector<double>;

TEST(Kernels, LinearBackwardMatchesFiniteDifferences) {
  const int64_t N = 7, C = 5, OC = 3;
  V x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), r = randn(N * OC, 4), out(N * OC);
  auto f = [&] {
    linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, r);
  };
  V dx(N * C), dw(OC * C, 0.0), db(OC, 0.0);
  linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, C, OC);
  expect_fd_gradient("linear dinp", x, dx, f);
  expect_fd_gradient("linear dweight", w, dw, f);
  expect_fd_gradient("linear dbias", b, db, f);
}

TEST(Kernels, VectorExpAndTanhAreAccurate) {
  double worst_exp = 0, worst_tanh = 0;
  for (double x = -87.0; x <= 88.0; x += 0.00731) {
    worst_exp = std::max(worst_exp, std::abs(double(vexp(float(x))) / std::exp(double(float(x))) - 1));
  }
  for (double u = -20.0; u <= 20.0; u += 0.00317)
    worst_tanh = std::max(worst_tanh, std::abs(double(vtanh(float(u))) - std::tanh(double(float(u)))));
  EXPECT_LT(worst_exp, 5e-7);
  EXPECT_LT(worst_tanh, 5e-7);
  EXPECT_EQ(vexp(-1000.0f), std::exp(-87.0f));  // clamped, finite
}

TEST(Kernels, LinearFloatMatchesDouble) {
  const int64_t N = 33, C = 17, OC = 29;
  V x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), out(N * OC);
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end()), outf(N * OC);
  linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  linear_forward(outf.data(), xf.data(), wf.data(), bf.data(), N, C, OC);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - double(outf[i])));
  EXPECT_LT(worst, 1e-4) << "first elements: double " << out[0] << " float " << outf[0];
}

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 7;
  V x = randn(N * C, 5), w = randn(C, 6), b = randn(C, 7), r = randn(N * C, 8), out(N * C), mean(N), rstd(N);
  auto f = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(out, r);
  };
  f();
  V dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect_fd_gradient("layernorm dinp", x, dx, f);
  expect_fd_gradient("layernorm dweight", w, dw, f);
  expect_fd_gradient("layernorm dbias", b, db, f);
}

TEST(Kernels, RMSNormBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 9;
  V x = randn(N * C, 9), w = randn(C, 10), r = randn(N * C, 11), out(N * C), rstd(N);
  auto f = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, r);
  };
  f();
  V dx(N * C, 0.0), dw(C, 0.0);
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_fd_gradient("rmsnorm dinp", x, dx, f);
  expect_fd_gradient("rmsnorm dweight", w, dw, f);
}

TEST(Kernels, GeluBackwardMatchesFiniteDifferences) {
  const int64_t n = 23;
  V x = randn(n, 12, 2.0), r = randn(n, 13), out(n), dx(n);
  auto f = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  gelu_backward(dx.data(), x.data(), r.data(), n);
  expect_fd_gradient("gelu", x, dx, f);
  // GELU(1) with the tanh approximation
  double one = 1.0, y;
  gelu_forward(&y, &one, 1);
  EXPECT_NEAR(y, 0.8411919906082768, 1e-12);
}

TEST(Kernels, SwigluBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, F = 5;
  V x = randn(N * 2 * F, 14), r = randn(N * F, 15), out(N * F), dx(N * 2 * F);
  auto f = [&] {
    swiglu_forward(out.data(), x.data(), N, F);
    return dot(out, r);
  };
  swiglu_backward(dx.data(), x.data(), r.data(), N, F);
  expect_fd_gradient("swiglu", x, dx, f);
}

// gpt-oss's clamped SwiGLU: the formula, and finite differences away from
// the clamps' corners (inputs on both sides of +-limit; at a corner the
// function has no derivative, so no input lies within the step of one).
TEST(Kernels, ClampedSwigluMatchesTheFormulaAndFiniteDifferences) {
  const int64_t N = 4, F = 6;
  const double alpha = 1.702, limit = 1.5;
  V x = randn(N * 2 * F, 31), r = randn(N * F, 32), out(N * F), dx(N * 2 * F);
  for (double& v : x) v *= 2.5;  // beyond the limit often
  for (double& v : x)
    if (std::abs(std::abs(v) - limit) < 1e-3) v += 0.01;
  clamped_swiglu_forward(out.data(), x.data(), N, F, alpha, limit);
  int clamped = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double g = std::min(x[size_t(n * 2 * F + f)], limit);
      const double u = std::clamp(x[size_t(n * 2 * F + F + f)], -limit, limit);
      clamped += x[size_t(n * 2 * F + f)] > limit || std::abs(x[size_t(n * 2 * F + F + f)]) > limit;
      EXPECT_NEAR(out[size_t(n * F + f)], g / (1 + std::exp(-alpha * g)) * (u + 1), 1e-14);
    }
  EXPECT_GT(clamped, 4) << "the inputs must reach the clamps";
  auto f = [&] {
    clamped_swiglu_forward(out.data(), x.data(), N, F, alpha, limit);
    return dot(out, r);
  };
  clamped_swiglu_backward(dx.data(), x.data(), r.data(), N, F, alpha, limit);
  expect_fd_gradient("clamped swiglu", x, dx, f, 1e-6, 1000);
}

// Queries and keys of D, values of Dv: the forward against the plain
// softmax formula (scale 1/sqrt(D)), the backward against finite
// differences, attention_lse against the forward. window > 0: query t sees
// keys u with t - u < window only; sinks: one logit per head in every
// row's denominator (gpt-oss), its gradient against finite differences too.
struct AttentionCase {
  int64_t B, T, H, KV, D, Dv, window = 0;
  bool sinks = false;
};
void check_attention(const AttentionCase& c) {
  const int64_t B = c.B, T = c.T, H = c.H, KV = c.KV, D = c.D, Dv = c.Dv, W = attention_qkv_width(H, KV, D, Dv);
  const std::string name = "H=" + std::to_string(H) + " KV=" + std::to_string(KV) + " D=" + std::to_string(D) +
                           " Dv=" + std::to_string(Dv) + " window=" + std::to_string(c.window) +
                           (c.sinks ? " sinks" : "");
  V qkv = randn(B * T * W, 16), r = randn(B * T * H * Dv, 17), out(B * T * H * Dv), lse(B * H * T);
  V sinks = c.sinks ? randn(H, 18) : V();
  auto f = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, KV, D, Dv, nullptr, c.window,
                      c.sinks ? sinks.data() : nullptr);
    return dot(out, r);
  };
  f();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t kvh = h / (H / KV), first = c.window > 0 ? std::max<int64_t>(0, t - c.window + 1) : 0;
        const double* q = qkv.data() + (b * T + t) * W + h * D;
        std::vector<double> s(size_t(t + 1), -INFINITY);
        double top = c.sinks ? sinks[size_t(h)] : -INFINITY, sum = 0;
        for (int64_t u = first; u <= t; ++u) {
          const double* k = qkv.data() + (b * T + u) * W + (H + kvh) * D;
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += q[e] * k[e];
          s[size_t(u)] = d / std::sqrt(double(D)), top = std::max(top, s[size_t(u)]);
        }
        for (double& x : s) sum += (x = std::exp(x - top));
        if (c.sinks) sum += std::exp(sinks[size_t(h)] - top);
        for (int64_t e = 0; e < Dv; ++e) {
          double o = 0;
          for (int64_t u = 0; u <= t; ++u)
            o += s[size_t(u)] / sum * qkv[size_t((b * T + u) * W + (H + KV) * D + kvh * Dv + e)];
          worst = std::max(worst, std::abs(o - out[size_t((b * T + t) * H * Dv + h * Dv + e)]));
        }
      }
  EXPECT_LT(worst, 1e-12) << name << ": the forward against softmax(q k / sqrt(D)) v";
  V dqkv(B * T * W);
  attention_backward(dqkv.data(), r.data(), qkv.data(), out.data(), lse.data(), B, T, H, KV, D, Dv, nullptr, c.window);
  expect_fd_gradient("attention dqkv " + name, qkv, dqkv, f, 1e-6, 400);
  if (c.sinks) {
    V dsinks(size_t(H), 0.0), scratch(dqkv.size()), delta(lse.size());
    f();
    attention_backward(scratch.data(), r.data(), qkv.data(), out.data(), lse.data(), B, T, H, KV, D, Dv, nullptr,
                       c.window, sinks.data(), dsinks.data());
    // the same from the row dot products (the context-parallel blocks' way)
    V again_d(size_t(H), 0.0);
    attention_delta(delta.data(), r.data(), out.data(), H * Dv, B, T, H, Dv);
    attention_sink_backward(again_d.data(), lse.data(), delta.data(), sinks.data(), B, T, H);
    for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(again_d[size_t(h)], dsinks[size_t(h)], 1e-14);
    expect_fd_gradient("attention dsinks " + name, sinks, dsinks, f);
  }
  // attention_lse reproduces the forward's log-sum-exp exactly
  V again(lse.size());
  attention_lse(again.data(), qkv.data(), B, T, H, KV, D, Dv, nullptr, c.window, c.sinks ? sinks.data() : nullptr);
  f();
  EXPECT_EQ(0, std::memcmp(again.data(), lse.data(), lse.size() * sizeof(double))) << name;
}
void check_attention(int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, int64_t Dv) {
  check_attention({B, T, H, KV, D, Dv});
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) { check_attention(2, 5, 3, 3, 3, 3); }
TEST(Kernels, GroupedQueryAttentionBackwardMatchesFiniteDifferences) { check_attention(2, 6, 4, 2, 4, 4); }
// Multi-head latent attention's shape: value heads narrower (or wider) than
// the query and key heads.
TEST(Kernels, AttentionWithValueHeadsOfTheirOwnSize) {
  check_attention(2, 6, 3, 3, 6, 4);
  check_attention(1, 5, 4, 2, 3, 5);
}

// Tiles: a sequence longer than one 64-key tile, with and without documents
// that start inside and across tiles.
TEST(Kernels, TiledAttentionBackwardMatchesFiniteDifferences) {
  check_attention(1, 150, 2, 1, 2, 2);
  check_attention(1, 150, 2, 2, 3, 2);
}

// Sliding windows shorter than a tile, across tile edges and longer than
// the sequence (no effect); a window of one key is the value itself.
TEST(Kernels, SlidingWindowAttentionMatchesTheFormula) {
  check_attention({2, 7, 2, 1, 3, 3, 3});
  check_attention({1, 150, 2, 1, 2, 2, 5});
  check_attention({1, 150, 2, 2, 3, 2, 70});
  check_attention({1, 20, 2, 1, 3, 3, 500});
  const int64_t T = 9, H = 2, KV = 1, D = 3, W = attention_qkv_width(H, KV, D, D);
  V qkv = randn(T * W, 21), out(T * H * D), lse(H * T);
  attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, KV, D, D, nullptr, 1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t e = 0; e < D; ++e)
        EXPECT_NEAR(out[size_t((t * H + h) * D + e)], qkv[size_t(t * W + (H + KV) * D + e)], 1e-15);
}

// Sinks, alone and with a window (gpt-oss's sliding layers).
TEST(Kernels, AttentionSinksMatchTheFormula) {
  check_attention({2, 6, 4, 2, 4, 4, 0, true});
  check_attention({1, 150, 2, 1, 3, 3, 20, true});
}

// Context parallelism: the sequence in 2N chunks, rank r holding chunks r
// and 2N-1-r; each rank's queries against every rank's keys, block by block
// in ring order and merged by their log-sum-exp, give the whole sequence's
// output, lse and gradients. Without the merge (each block overwriting) the
// output is wrong.
void check_blocks(bool documents, int64_t D, int64_t Dv, int64_t window = 0) {
  const int64_t B = 2, N = 3, c = 23, T = 2 * N * c, H = 4, KV = 2, W = attention_qkv_width(H, KV, D, Dv);
  const std::vector<int32_t> ds =
      documents ? test::doc_starts(B, T, {{0, 5, 60, 61, 100}, {0, 70}}) : std::vector<int32_t>(size_t(B * T), 0);
  const V qkv = randn(B * T * W, 41), dout = randn(B * T * H * Dv, 42);
  V out(size_t(B * T * H * Dv)), lse(size_t(B * H * T)), dqkv(qkv.size());
  const int32_t* whole_ds = documents ? ds.data() : nullptr;
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, KV, D, Dv, whole_ds, window);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, KV, D, Dv, whole_ds,
                     window);
  // each rank's rows (global positions) and their slices of the tensors
  std::vector<std::vector<int32_t>> pos(N);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t chunk : {r, 2 * N - 1 - r})
      for (int64_t t = chunk * c; t < (chunk + 1) * c; ++t) pos[size_t(r)].push_back(int32_t(t));
  const int64_t Tl = 2 * c;
  auto local = [&](const V& x, int64_t width, int64_t r) {
    V y(size_t(B * Tl * width));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tl; ++t)
        std::copy_n(x.begin() + (b * T + pos[size_t(r)][size_t(t)]) * width, width, y.begin() + (b * Tl + t) * width);
    return y;
  };
  std::vector<V> lq(N), lo(N), ll(N), ld(N), lg(N), lds(N);
  std::vector<std::vector<int32_t>> lstart(N);
  for (int64_t r = 0; r < N; ++r) {
    lq[size_t(r)] = local(qkv, W, r), lg[size_t(r)] = local(dout, H * Dv, r);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tl; ++t) lstart[size_t(r)].push_back(ds[size_t(b * T + pos[size_t(r)][size_t(t)])]);
  }
  // QK-clip's largest logit per head of rank r's rows (AttentionBlock::head_max), by the formula
  auto head_max = [&](int64_t r) {
    V top(size_t(H), -INFINITY);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int32_t t : pos[size_t(r)])
          for (int64_t s = 0; s <= t; ++s) {
            if ((documents && s < ds[size_t(b * T + t)]) || (window > 0 && t - s >= window)) continue;
            double dot = 0;
            for (int64_t e = 0; e < D; ++e)
              dot +=
                  qkv[size_t((b * T + t) * W + h * D + e)] * qkv[size_t((b * T + s) * W + (H + h / (H / KV)) * D + e)];
            top[size_t(h)] = std::max(top[size_t(h)], dot / std::sqrt(double(D)));
          }
    return top;
  };
  for (bool merge : {true, false}) {
    std::vector<V> dkv(N, V(size_t(B * Tl * W), 0.0));
    double worst = 0;
    for (int64_t r = 0; r < N; ++r) {
      V o(size_t(B * Tl * H * Dv)), l(size_t(B * H * Tl)), top(size_t(H), -INFINITY);
      auto block = [&](int64_t src) {
        AttentionBlock<double> a;
        a.B = B, a.Tq = Tl, a.Tk = Tl, a.H = H, a.KV = KV, a.D = D, a.Dv = Dv;
        a.q = lq[size_t(r)].data(), a.ldq = W;
        a.k = lq[size_t(src)].data() + H * D, a.v = lq[size_t(src)].data() + (H + KV) * D, a.ldkv = W;
        a.q_pos = pos[size_t(r)].data(), a.k_pos = pos[size_t(src)].data(),
        a.doc_start = documents ? lstart[size_t(r)].data() : nullptr, a.window = window;
        return a;
      };
      for (int64_t step = 0; step < N; ++step) {  // ring order: own block first, then r-1, r-2, ...
        AttentionBlock<double> a = block((r - step + N) % N);
        a.head_max = top.data();
        attention_block_forward(o.data(), H * Dv, l.data(), a, merge ? step > 0 : false);
      }
      const V want_top = head_max(r);
      for (int64_t h = 0; h < H; ++h)
        ASSERT_NEAR(top[size_t(h)], want_top[size_t(h)], 1e-12) << "rank " << r << " head " << h;
      const V want = local(out, H * Dv, r);
      for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::abs(o[i] - want[i]));
      if (!merge) continue;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < Tl; ++t)
            ASSERT_NEAR(l[size_t((b * H + h) * Tl + t)], lse[size_t((b * H + h) * T + pos[size_t(r)][size_t(t)])],
                        1e-12);
      V delta(size_t(B * H * Tl));
      attention_delta(delta.data(), lg[size_t(r)].data(), o.data(), H * Dv, B, Tl, H, Dv);
      V dq(size_t(B * Tl * W), 0.0);
      for (int64_t step = 0; step < N; ++step) {
        const int64_t src = (r - step + N) % N;
        attention_block_backward(dq.data(), W, dkv[size_t(src)].data() + H * D, dkv[size_t(src)].data() + (H + KV) * D,
                                 W, lg[size_t(r)].data(), H * Dv, l.data(), delta.data(), block(src));
      }
      const V want_d = local(dqkv, W, r);
      for (int64_t row = 0; row < B * Tl; ++row)
        for (int64_t e = 0; e < H * D; ++e)
          ASSERT_NEAR(dq[size_t(row * W + e)], want_d[size_t(row * W + e)], 1e-10) << "dq row " << row;
    }
    if (!merge) {
      EXPECT_GT(worst, 1e-3) << "blocks that overwrite each other cannot give the whole sequence's output";
      continue;
    }
    EXPECT_LT(worst, 1e-12);
    for (int64_t r = 0; r < N; ++r) {
      const V want_d = local(dqkv, W, r);
      for (int64_t row = 0; row < B * Tl; ++row)
        for (int64_t e = H * D; e < W; ++e)
          ASSERT_NEAR(dkv[size_t(r)][size_t(row * W + e)], want_d[size_t(row * W + e)], 1e-10) << "dk/dv row " << row;
    }
  }
}
TEST(Kernels, AttentionBlocksMergeToTheWholeSequence) {
  check_blocks(false, 8, 8);
  check_blocks(false, 8, 5);  // value heads of their own size (multi-head latent attention)
}
TEST(Kernels, DocumentMaskedAttentionBlocksMergeToTheWholeSequence) { check_blocks(true, 8, 8); }
// Sliding windows shorter than a block (23 rows) and spanning two, with documents too.
TEST(Kernels, SlidingWindowAttentionBlocksMergeToTheWholeSequence) {
  check_blocks(false, 8, 8, 10);
  check_blocks(true, 8, 8, 30);
}

TEST(Kernels, AttentionIsCausal) {
  const int64_t B = 1, T = 6, H = 2, KV = 1, D = 4, W = (H + 2 * KV) * D;
  V qkv = randn(B * T * W, 18), out(B * T * H * D), lse(B * H * T);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, KV, D, D);
  V out2(out.size());
  qkv[(T - 1) * W + (H + KV) * D] += 10.0;  // change the last token's value
  attention_forward(out2.data(), lse.data(), qkv.data(), B, T, H, KV, D, D);
  for (int64_t i = 0; i < (T - 1) * H * D; ++i) EXPECT_EQ(out[i], out2[i]) << "future token leaked at " << i;
}

TEST(Kernels, RotaryBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, H = 2, KV = 1, D = 6, W = (H + 2 * KV) * D;
  auto table = rope_table(T, D, 10000.0);
  V x = randn(B * T * W, 19), r = randn(B * T * W, 20), y(x.size());
  auto f = [&] {
    y = x;
    rope_forward(y.data(), table.data(), B, T, H, KV, D);
    return dot(y, r);
  };
  V dx = r;
  rope_backward(dx.data(), table.data(), B, T, H, KV, D);
  expect_fd_gradient("rope", x, dx, f, 1e-6, 200);
  // position 0 is not rotated, v is never rotated
  f();
  for (int64_t c = 0; c < W; ++c) EXPECT_DOUBLE_EQ(y[c], x[c]);
  for (int64_t c = (H + KV) * D; c < W; ++c) EXPECT_DOUBLE_EQ(y[W + c], x[W + c]);
}

TEST(Kernels, EmbeddingBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 4, C = 3, Vocab = 5, N = B * T;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 2, 3};
  V wte = randn(Vocab * C, 21), wpe = randn(T * C, 22), r = randn(N * C, 23), out(N * C);
  auto f = [&] {
    embedding_forward(out.data(), tok.data(), wte.data(), N, C, 0, Vocab);
    position_forward(out.data(), out.data(), wpe.data(), 0, N, T, C);
    return dot(out, r);
  };
  V dwte(Vocab * C, 0.0), dwpe(T * C, 0.0);
  embedding_backward(dwte.data(), r.data(), tok.data(), N, C, 0, Vocab);
  position_backward(dwpe.data(), r.data(), 0, N, T, C);
  expect_fd_gradient("embedding dwte", wte, dwte, f);
  expect_fd_gradient("embedding dwpe", wpe, dwpe, f);
}

// A vocab range [2, 4) of the table: other tokens give zero rows and no
// gradient; the rows of a sequence shard get the positions of their place.
TEST(Kernels, EmbeddingVocabRangeAndSequenceShard) {
  const int64_t T = 4, C = 3, N = 8;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 2, 3};
  V wte = randn(5 * C, 21), wpe = randn(T * C, 22), full(N * C), part(N * C);
  embedding_forward(full.data(), tok.data(), wte.data(), N, C, 0, 5);
  embedding_forward(part.data(), tok.data(), wte.data() + 2 * C, N, C, 2, 2);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(part[size_t(n * C + c)], tok[size_t(n)] >= 2 && tok[size_t(n)] < 4 ? full[size_t(n * C + c)] : 0.0);
  V dwte(2 * C, 0.0), ones(N * C, 1.0);
  embedding_backward(dwte.data(), ones.data(), tok.data(), N, C, 2, 2);
  EXPECT_EQ(dwte[0], 1.0);  // token 2 once
  EXPECT_EQ(dwte[C], 3.0);  // token 3 three times
  V shard(3 * C);
  position_forward(shard.data(), full.data() + 5 * C, wpe.data(), 5, 3, T, C);  // rows 5..7: positions 1..3
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(shard[size_t(i * C)], full[size_t((5 + i) * C)] + wpe[size_t((1 + i) * C)]);
}

TEST(Kernels, ResidualAndBiasBackward) {
  const int64_t N = 5, C = 7;
  V a = randn(N * C, 1), b = randn(N * C, 2), bias = randn(C, 3), out(N * C), r = randn(N * C, 4);
  residual_forward(out.data(), a.data(), b.data(), bias.data(), N, C);
  EXPECT_EQ(out[size_t(2 * C + 3)], a[size_t(2 * C + 3)] + b[size_t(2 * C + 3)] + bias[3]);
  auto f = [&] {
    residual_forward(out.data(), a.data(), b.data(), bias.data(), N, C);
    return dot(out, r);
  };
  V db(C, 5.0);
  bias_backward(db.data(), r.data(), N, C, /*accumulate=*/false);
  expect_fd_gradient("bias", bias, db, f);
  V db2 = db;
  bias_backward(db2.data(), r.data(), N, C, /*accumulate=*/true);
  for (int64_t c = 0; c < C; ++c) EXPECT_DOUBLE_EQ(db2[size_t(c)], 2 * db[size_t(c)]);
}

// The vocab-parallel passes over 3 column ranges, with the reductions done
// by hand, give the fused kernel's losses and dlogits; the last range holds
// the padding (Vvalid < V) and one range holds no real column at all.
TEST(Kernels, CrossEntropyVocabParallelMatchesFused) {
  const int64_t N = 6, Vreal = 10, Vl = 4, R = 4;  // 4 ranks x 4 columns = 16 >= 10
  std::vector<int32_t> tgt = {0, 9, 3, 4, 7, 8};
  V logits = randn(N * R * Vl, 25, 3.0), losses(N);
  V fused = logits;
  softmax_cross_entropy(losses.data(), fused.data(), tgt.data(), N, R * Vl, Vreal, LossGrad<double>::scaled(0.5));
  std::vector<V> part(size_t(R), V(size_t(N * Vl)));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < Vl; ++v) part[size_t(r)][size_t(n * Vl + v)] = logits[size_t(n * R * Vl + r * Vl + v)];
  auto valid = [&](int64_t r) { return std::clamp<int64_t>(Vreal - r * Vl, 0, Vl); };
  V mx(N, -INFINITY), sums(2 * N, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    V m(N);
    cross_entropy_local_max(m.data(), part[size_t(r)].data(), N, Vl, valid(r));
    for (int64_t n = 0; n < N; ++n) mx[size_t(n)] = std::max(mx[size_t(n)], m[size_t(n)]);
  }
  for (int64_t r = 0; r < R; ++r) {
    V s(2 * N);
    cross_entropy_local_sums(s.data(), part[size_t(r)].data(), mx.data(), tgt.data(), N, Vl, valid(r), r * Vl);
    for (int64_t i = 0; i < 2 * N; ++i) sums[size_t(i)] += s[size_t(i)];
  }
  for (int64_t r = 0; r < R; ++r) {
    V l(N);
    cross_entropy_finish(l.data(), part[size_t(r)].data(), mx.data(), sums.data(), tgt.data(), N, Vl, valid(r), r * Vl,
                         LossGrad<double>::scaled(0.5));
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_NEAR(l[size_t(n)], losses[size_t(n)], 1e-12);
      for (int64_t v = 0; v < Vl; ++v)
        EXPECT_NEAR(part[size_t(r)][size_t(n * Vl + v)], fused[size_t(n * R * Vl + r * Vl + v)], 1e-12)
            << "rank " << r << " row " << n << " column " << v;
    }
  }
}

TEST(Kernels, CrossEntropyBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, Vocab = 7;
  std::vector<int32_t> tgt = {0, 6, 3, 3};
  V logits = randn(N * Vocab, 24, 3.0), losses(N);
  auto f = [&] {
    V tmp = logits;
    softmax_cross_entropy(losses.data(), tmp.data(), tgt.data(), N, Vocab, Vocab, LossGrad<double>::forward_only());
    double s = 0;
    for (double l : losses) s += l;
    return s;
  };
  V d = logits;
  softmax_cross_entropy(losses.data(), d.data(), tgt.data(), N, Vocab, Vocab, LossGrad<double>::scaled(1.0));
  expect_fd_gradient("cross-entropy", logits, d, f);
  // uniform logits: loss = log(V)
  V flat(Vocab, 0.0);
  double loss;
  int32_t t0 = 2;
  softmax_cross_entropy(&loss, flat.data(), &t0, 1, Vocab, Vocab, LossGrad<double>::forward_only());
  EXPECT_NEAR(loss, std::log(double(Vocab)), 1e-12);
}

// The gradient is an explicit flag, never a magic scale: a zero scale
// writes a zero gradient (a loss weighted 0 in training), forward only
// leaves the logits as they are, fused and vocab-parallel alike.
TEST(Kernels, CrossEntropyZeroScaleWritesZeroGradient) {
  const int64_t N = 3, Vocab = 6;
  std::vector<int32_t> tgt = {1, 5, -1};
  const V logits = randn(N * Vocab, 27, 2.0);
  V zero = logits, kept = logits, l1(N), l2(N);
  softmax_cross_entropy(l1.data(), zero.data(), tgt.data(), N, Vocab, Vocab, LossGrad<double>::scaled(0.0));
  softmax_cross_entropy(l2.data(), kept.data(), tgt.data(), N, Vocab, Vocab, LossGrad<double>::forward_only());
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_EQ(zero[i], 0.0) << "element " << i;
    EXPECT_EQ(kept[i], logits[i]) << "element " << i;
  }
  EXPECT_EQ(l1, l2);
  V mx(N), sums(2 * N), part = logits, partk = logits, lp(N);
  cross_entropy_local_max(mx.data(), part.data(), N, Vocab, Vocab);
  cross_entropy_local_sums(sums.data(), part.data(), mx.data(), tgt.data(), N, Vocab, Vocab, 0);
  cross_entropy_finish(lp.data(), part.data(), mx.data(), sums.data(), tgt.data(), N, Vocab, Vocab, 0,
                       LossGrad<double>::scaled(0.0));
  cross_entropy_finish(lp.data(), partk.data(), mx.data(), sums.data(), tgt.data(), N, Vocab, Vocab, 0,
                       LossGrad<double>::forward_only());
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_EQ(part[i], 0.0) << "element " << i;
    EXPECT_EQ(partk[i], logits[i]) << "element " << i;
  }
}

TEST(Kernels, CrossEntropyPaddingTakesNoProbability) {
  const int64_t Vocab = 8, Valid = 5;
  V logits = {0, 1, 2, 3, 4, 100, 100, 100};
  double loss;
  int32_t t = 4;
  softmax_cross_entropy(&loss, logits.data(), &t, 1, Vocab, Valid, LossGrad<double>::scaled(1.0));
  for (int64_t v = Valid; v < Vocab; ++v) EXPECT_EQ(logits[v], 0.0);
  EXPECT_LT(loss, 1.0);
}

TEST(Kernels, GemmErrorsNameLibraryStatementAndRank) {
  std::vector<float> a(4), c(4);
  try {
    gemm<float>(false, false, 2, 2, 2, 1.f, a.data(), 1, a.data(), 2, 0.f, c.data(), 2);  // lda < K
    FAIL() << "no error for lda < K";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("oneDNN error in `dnnl_sgemm("), std::string::npos) << m;
    EXPECT_NE(m.find("gemm_cpu.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("on rank 0 ("), std::string::npos) << m;
    EXPECT_NE(m.find("dnnl_status_t"), std::string::npos) << m;
  }
}

TEST(Kernels, AdamWMatchesTextbookUpdate) {
  const int64_t n = 9;
  V p = randn(n, 25), g = randn(n, 26), m(n, 0.0), v(n, 0.0);
  V pr = p, mr = m, vr = v;
  AdamWParams hp{1e-2, 0.9, 0.95, 1e-8, 0.1, 0};
  for (int64_t step = 1; step <= 3; ++step) {
    hp.step = step;
    adamw_update(p.data(), m.data(), v.data(), g.data(), n, hp);
    for (int64_t i = 0; i < n; ++i) {
      mr[i] = 0.9 * mr[i] + 0.1 * g[i];
      vr[i] = 0.95 * vr[i] + 0.05 * g[i] * g[i];
      double mhat = mr[i] / (1 - std::pow(0.9, step)), vhat = vr[i] / (1 - std::pow(0.95, step));
      pr[i] -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * pr[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 1e-12) << i;
  // grad_scale is the same as scaling the gradient first
  V p2 = p, m2 = m, v2 = v, g2 = g;
  for (auto& x : g2) x *= 0.25;
  hp.step = 4;
  adamw_update(p2.data(), m2.data(), v2.data(), g2.data(), n, hp);
  hp.grad_scale = 0.25;
  adamw_update(p.data(), m.data(), v.data(), g.data(), n, hp);
  for (int64_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(p[i], p2[i]) << i;
}

}  // namespace trident::kernels

namespace trident::kernels {
namespace {

// Document masking: attention, rotary and learned positions over a batch of
// packed documents equal running each document alone as its own sequence.
TEST(Kernels, DocumentMaskEqualsEachDocumentAlone) {
  using V = std::vector<double>;
  const int64_t B = 2, T = 23, H = 4, KV = 2, D = 8, C = 6, W = (H + 2 * KV) * D;
  const std::vector<std::vector<int64_t>> starts = {{0, 5, 6, 15}, {0, 11}};
  std::vector<int32_t> doc_start(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s : starts[size_t(b)])
        if (s <= t) doc_start[size_t(b * T + t)] = int32_t(s);
  const V qkv0 = test::randn(B * T * W, 31), dout = test::randn(B * T * H * D, 32), x = test::randn(B * T * C, 33);
  const V wpe = test::randn(T * C, 34);
  const auto table = rope_table(T, D, 10000.0);
  // the packed batch, masked
  V qkv = qkv0, out(size_t(B * T * H * D)), lse(size_t(B * H * T)), dqkv(qkv.size()), pos(x.size());
  rope_forward(qkv.data(), table.data(), B, T, H, KV, D, doc_start.data());
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, KV, D, D, doc_start.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, KV, D, D, doc_start.data());
  rope_backward(dqkv.data(), table.data(), B, T, H, KV, D, doc_start.data());
  position_forward(pos.data(), x.data(), wpe.data(), 0, B * T, T, C, doc_start.data());
  V dwpe(wpe.size(), 0.0);
  position_backward(dwpe.data(), dout.data(), 0, B * T, T, C, doc_start.data());  // dout rows as C-wide gradients
  // each document alone
  V dwpe_alone(wpe.size(), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& st = starts[size_t(b)];
    for (size_t k = 0; k < st.size(); ++k) {
      const int64_t s = st[k], n = (k + 1 < st.size() ? st[k + 1] : T) - s;
      V q(qkv0.begin() + (b * T + s) * W, qkv0.begin() + (b * T + s + n) * W), o(size_t(n * H * D)), p(size_t(H * n)),
          dq(q.size());
      V go(dout.begin() + (b * T + s) * H * D, dout.begin() + (b * T + s + n) * H * D);
      rope_forward(q.data(), table.data(), 1, n, H, KV, D);
      attention_forward(o.data(), p.data(), q.data(), 1, n, H, KV, D, D);
      attention_backward(dq.data(), go.data(), q.data(), o.data(), p.data(), 1, n, H, KV, D, D);
      rope_backward(dq.data(), table.data(), 1, n, H, KV, D);
      for (int64_t i = 0; i < n * H * D; ++i)
        ASSERT_NEAR(out[size_t((b * T + s) * H * D + i)], o[size_t(i)], 1e-12)
            << "output, sequence " << b << " doc " << k;
      for (int64_t i = 0; i < n * W; ++i)
        ASSERT_NEAR(dqkv[size_t((b * T + s) * W + i)], dq[size_t(i)], 1e-12) << "dqkv, sequence " << b << " doc " << k;
      V px(x.begin() + (b * T + s) * C, x.begin() + (b * T + s + n) * C), pp(px.size());
      position_forward(pp.data(), px.data(), wpe.data(), 0, n, T, C);
      for (int64_t i = 0; i < n * C; ++i) ASSERT_EQ(pos[size_t((b * T + s) * C + i)], pp[size_t(i)]) << "positions";
      V g(dout.begin() + (b * T + s) * C, dout.begin() + (b * T + s + n) * C);
      position_backward(dwpe_alone.data(), g.data(), 0, n, T, C);
    }
  }
  for (size_t i = 0; i < dwpe.size(); ++i) ASSERT_NEAR(dwpe[i], dwpe_alone[i], 1e-12) << "position gradient " << i;
  // and the mask matters: without it the outputs differ
  V plain(out.size()), pprobs(lse.size());
  attention_forward(plain.data(), pprobs.data(), qkv.data(), B, T, H, KV, D, D);
  EXPECT_GT(std::abs(plain[size_t(6 * H * D)] - out[size_t(6 * H * D)]), 1e-6);
}

}  // namespace
}  // namespace trident::kernels

namespace trident::kernels {
namespace {

// data.mask_eod_loss: a negative target takes no loss and gives a zero
// dlogits row, fused and vocab-parallel; the other rows are unchanged.
TEST(Kernels, IgnoredTargetsTakeNoLossNorGradient) {
  using V = std::vector<double>;
  const int64_t N = 6, Vv = 9;
  std::vector<int32_t> all = {1, 4, 8, 0, 3, 5}, some = all;
  some[1] = some[4] = -1;
  const V logits = test::randn(N * Vv, 41);
  V l1 = logits, l2 = logits, loss1(N), loss2(N);
  softmax_cross_entropy(loss1.data(), l1.data(), all.data(), N, Vv, Vv, LossGrad<double>::scaled(0.5));
  softmax_cross_entropy(loss2.data(), l2.data(), some.data(), N, Vv, Vv, LossGrad<double>::scaled(0.5));
  // vocab-parallel over two column ranges [0, 4) and [4, 9)
  V lp = logits, mx(N, -INFINITY), sums(2 * N, 0.0), lossp(N);
  for (auto [vb, vn] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}}) {
    V part(size_t(N * vn)), m(N), s(2 * N);
    for (int64_t n = 0; n < N; ++n) std::copy_n(logits.begin() + n * Vv + vb, vn, part.begin() + n * vn);
    cross_entropy_local_max(m.data(), part.data(), N, vn, vn);
    for (int64_t n = 0; n < N; ++n) mx[size_t(n)] = std::max(mx[size_t(n)], m[size_t(n)]);
  }
  for (auto [vb, vn] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}}) {
    V part(size_t(N * vn)), s(2 * N);
    for (int64_t n = 0; n < N; ++n) std::copy_n(logits.begin() + n * Vv + vb, vn, part.begin() + n * vn);
    cross_entropy_local_sums(s.data(), part.data(), mx.data(), some.data(), N, vn, vn, vb);
    for (size_t i = 0; i < s.size(); ++i) sums[i] += s[i];
  }
  for (auto [vb, vn] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}}) {
    V part(size_t(N * vn));
    for (int64_t n = 0; n < N; ++n) std::copy_n(logits.begin() + n * Vv + vb, vn, part.begin() + n * vn);
    cross_entropy_finish(lossp.data(), part.data(), mx.data(), sums.data(), some.data(), N, vn, vn, vb,
                         LossGrad<double>::scaled(0.5));
    for (int64_t n = 0; n < N; ++n) std::copy_n(part.begin() + n * vn, vn, lp.begin() + n * Vv + vb);
  }
  for (int64_t n = 0; n < N; ++n) {
    const bool ignored = some[size_t(n)] < 0;
    EXPECT_EQ(loss2[size_t(n)], ignored ? 0.0 : loss1[size_t(n)]) << "row " << n;
    EXPECT_NEAR(lossp[size_t(n)], loss2[size_t(n)], 1e-12) << "vocab-parallel row " << n;
    for (int64_t v = 0; v < Vv; ++v) {
      const size_t i = size_t(n * Vv + v);
      EXPECT_EQ(l2[i], ignored ? 0.0 : l1[i]) << "row " << n << " column " << v;
      EXPECT_NEAR(lp[i], l2[i], 1e-12) << "vocab-parallel row " << n << " column " << v;
    }
  }
}

}  // namespace
}  // namespace trident::kernels
