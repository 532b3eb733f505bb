// FP8 GEMMs (train.fp8, model/fp8_linear.hpp) split over ranks against one
// rank, with the same inputs: a column-parallel and a row-parallel linear
// over the tensor group and a linear over the context group (rows split),
// each through the model's own path (LayerOps::linear_fwd / linear_bwd),
// two steps (delayed scaling casts the second with the first's amaxes),
// under tensorwise, delayed and blockwise scaling.
//
// With the same inputs every quantised operand is the single rank's, bit
// for bit, when the scales are the whole tensor's: the tensorwise amax
// max-reduced over the ranks holding parts of the tensor, delayed
// scaling's over every rank at the step's end, blockwise tiles whole on
// each rank (the splits are multiples of 128 here). Only the GEMMs' sums
// differ in order, so the outputs and gradients agree to float32 rounding;
// a scale left unreduced moves every value of a tensor by up to half an
// FP8 step (percent). The whole trainer on these meshes (where rounding
// differences between meshes flip single FP8 values and the runs drift
// apart) is in test_pipeline (Pipeline.Fp8MatchesSingleRank).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/layer_ops.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"
#include "tests/test_util.hpp"

namespace trident {

int g_world = 1;
parallel::Communicator* g_comm = nullptr;

namespace {

using F = std::vector<float>;

F randf(int64_t n, uint32_t seed, double scale) {
  const std::vector<double> d = test::randn(size_t(n), seed, scale);
  return F(d.begin(), d.end());
}
F cols_of(const F& m, int64_t rows, int64_t cols, int64_t c0, int64_t cn) {
  F out(size_t(rows * cn));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cn; ++c) out[size_t(r * cn + c)] = m[size_t(r * cols + c0 + c)];
  return out;
}
F rows_of(const F& m, int64_t cols, int64_t r0, int64_t rn) {
  return F(m.begin() + r0 * cols, m.begin() + (r0 + rn) * cols);
}
void sum_over_world(F& v) { g_comm->all_reduce(Tensor::borrow(v.data(), int64_t(v.size())))->wait(); }

struct Recipe8 {
  const char* name;
  Fp8Recipe recipe;
};
const Recipe8 kRecipes[] = {
    {"tensorwise", Fp8Recipe::tensorwise}, {"delayed", Fp8Recipe::delayed}, {"blockwise", Fp8Recipe::blockwise}};

// A linear's forward, input gradient and weight gradient, each step.
struct Steps {
  std::vector<F> y, dx, dw;
};

// LayerOps (the model's linears) with FP8 on the given regions.
struct Linear8 {
  ModelConfig cfg;
  model::LocalDims dims;
  std::unique_ptr<model::LayerOps<float>> ops;
  Linear8(Fp8Recipe recipe, int64_t C, int64_t OC, parallel::TensorParallel& tp, parallel::ContextParallel& cp) {
    cfg.arch = Arch::llama, cfg.layers = 1, cfg.hidden = C, cfg.heads = 1, cfg.kv_heads = 1, cfg.ffn_hidden = OC;
    cfg.seq_len = cp.local_len() * cp.size(), cfg.vocab = 2;
    dims = model::local_dims(cfg, {});
    ops = std::make_unique<model::LayerOps<float>>(cfg, dims, tp, cp, Device{}, kernels::Precision::fp32);
    Fp8Config f;
    f.recipe = recipe, f.format = recipe == Fp8Recipe::blockwise ? Fp8Format::e4m3 : Fp8Format::hybrid;
    f.amax_history = 4;
    ops->fp8 = std::make_unique<model::Fp8Linears>(f, 1, std::vector<int64_t>{0}, tp, cp);
  }
  Steps run(const F& x, const F& w, const F& dy, int64_t N, int64_t C, int64_t OC, int steps = 2) {
    Steps s;
    const model::LinearSite site{0, model::Linear::fc};
    for (int i = 0; i < steps; ++i) {
      F y(size_t(N * OC)), dx(size_t(N * C)), dw(size_t(OC * C));
      ops->fp8->set_training(true);
      ops->linear_fwd(y.data(), {x.data()}, {w.data()}, nullptr, N, C, OC, site);
      ops->linear_bwd(dx.data(), dw.data(), nullptr, {dy.data()}, {x.data()}, {w.data()}, N, C, OC, false, site);
      ops->fp8->end_step(nullptr);
      s.y.push_back(std::move(y)), s.dx.push_back(std::move(dx)), s.dw.push_back(std::move(dw));
    }
    return s;
  }
};

// The single rank's linear on the whole tensors.
Steps single(Fp8Recipe recipe, const F& x, const F& w, const F& dy, int64_t N, int64_t C, int64_t OC) {
  parallel::TensorParallel tp(nullptr, false);
  parallel::ContextParallel cp(nullptr, ContextMode::ring, N);
  Linear8 one(recipe, C, OC, tp, cp);
  return one.run(x, w, dy, N, C, OC);
}

// |got - want| <= 1e-5 max |want| (float32 rounding of sums in another order).
void expect_close(const std::string& what, const F& got, const F& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float top = 0;
  for (float v : want) top = std::max(top, std::abs(v));
  size_t worst = 0;
  float err = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::abs(got[i] - want[i]) > err) err = std::abs(got[i] - want[i]), worst = i;
  EXPECT_LE(err, 1e-5f * top) << what << ": worst at " << worst << ": " << got[worst] << " vs single rank "
                              << want[worst] << " (largest " << top << "), rank " << g_comm->rank() << " of "
                              << g_world;
}

// Sizes: every split a multiple of 128 (blockwise tiles whole on each rank);
// tokens not a multiple of 128 where they are not split (a partial tile).
constexpr int64_t kTokens = 96;

TEST(Fp8Mesh, ColumnParallelLinearMatchesOneRank) {
  const int t = g_world, r = g_comm->rank();
  const int64_t N = kTokens, C = 256, OC = 128 * t, OCl = 128;
  const F x = randf(N * C, 1, 2.0), w = randf(OC * C, 2, 0.05), dy = randf(N * OC, 3, 1e-3);
  for (const Recipe8& rc : kRecipes) {
    const Steps ref = single(rc.recipe, x, w, dy, N, C, OC);
    parallel::TensorParallel tp(g_comm, false);
    parallel::ContextParallel cp(nullptr, ContextMode::ring, N);
    Linear8 mine(rc.recipe, C, OCl, tp, cp);
    Steps got = mine.run(x, rows_of(w, C, r * OCl, OCl), cols_of(dy, N, OC, r * OCl, OCl), N, C, OCl);
    for (size_t s = 0; s < 2; ++s) {
      const std::string at = std::string(rc.name) + " step " + std::to_string(s + 1);
      sum_over_world(got.dx[s]);  // the input gradient's partial sums (the region's backward exit)
      expect_close(at + " column output", got.y[s], cols_of(ref.y[s], N, OC, r * OCl, OCl));
      expect_close(at + " column input gradient", got.dx[s], ref.dx[s]);
      expect_close(at + " column weight gradient", got.dw[s], rows_of(ref.dw[s], C, r * OCl, OCl));
    }
  }
}

TEST(Fp8Mesh, RowParallelLinearMatchesOneRank) {
  const int t = g_world, r = g_comm->rank();
  const int64_t N = kTokens, C = 128 * t, Cl = 128, OC = 192;
  F x = randf(N * C, 4, 2.0), w = randf(OC * C, 5, 0.05), dy = randf(N * OC, 6, 1e-3);
  for (int64_t i = 0; i < N; ++i) x[size_t(i * C)] *= 30;  // the amax on rank 0's columns: the others' reduced up
  for (const Recipe8& rc : kRecipes) {
    const Steps ref = single(rc.recipe, x, w, dy, N, C, OC);
    parallel::TensorParallel tp(g_comm, false);
    parallel::ContextParallel cp(nullptr, ContextMode::ring, N);
    Linear8 mine(rc.recipe, Cl, OC, tp, cp);
    Steps got = mine.run(cols_of(x, N, C, r * Cl, Cl), cols_of(w, OC, C, r * Cl, Cl), dy, N, Cl, OC);
    for (size_t s = 0; s < 2; ++s) {
      const std::string at = std::string(rc.name) + " step " + std::to_string(s + 1);
      sum_over_world(got.y[s]);  // the output's partial sums (the region's exit)
      expect_close(at + " row output", got.y[s], ref.y[s]);
      expect_close(at + " row input gradient", got.dx[s], cols_of(ref.dx[s], N, C, r * Cl, Cl));
      expect_close(at + " row weight gradient", got.dw[s], cols_of(ref.dw[s], OC, C, r * Cl, Cl));
    }
  }
}

TEST(Fp8Mesh, ContextSplitLinearMatchesOneRank) {
  const int t = g_world, r = g_comm->rank();
  const int64_t Nl = 128, N = Nl * t, C = 160, OC = 256;
  F x = randf(N * C, 7, 2.0), w = randf(OC * C, 8, 0.05), dy = randf(N * OC, 9, 1e-3);
  for (int64_t c = 0; c < C; ++c) x[size_t(c)] *= 30;  // the amax in the first rows (rank 0's)
  for (int64_t c = 0; c < OC; ++c) dy[size_t(c)] *= 30;
  for (const Recipe8& rc : kRecipes) {
    const Steps ref = single(rc.recipe, x, w, dy, N, C, OC);
    parallel::TensorParallel tp(nullptr, false);
    parallel::ContextParallel cp(g_comm, ContextMode::ring, N);
    Linear8 mine(rc.recipe, C, OC, tp, cp);
    Steps got = mine.run(rows_of(x, C, r * Nl, Nl), w, rows_of(dy, OC, r * Nl, Nl), Nl, C, OC);
    for (size_t s = 0; s < 2; ++s) {
      const std::string at = std::string(rc.name) + " step " + std::to_string(s + 1);
      sum_over_world(got.dw[s]);  // the weight gradient's partial sums over the sequence shards
      expect_close(at + " context output", got.y[s], rows_of(ref.y[s], OC, r * Nl, Nl));
      expect_close(at + " context input gradient", got.dx[s], rows_of(ref.dx[s], C, r * Nl, Nl));
      expect_close(at + " context weight gradient", got.dw[s], ref.dw[s]);
    }
  }
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv, [](trident::parallel::MpiCommunicator& w) {
    trident::g_world = w.size();
    trident::g_comm = &w;
  });
}
