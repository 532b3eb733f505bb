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
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/fp8_gather.hpp"
#include "model/layer_ops.hpp"
#include "parallel/counted_communicator.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/zero_storage.hpp"
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

// ZeRO 3's FP8 parameter gathers (model/fp8_gather.hpp) over the world as
// the shard group: two segments whose weights, norms and biases the equal
// shards cut anywhere. The window holds, bit for bit, each weight cast with
// the whole weight's scale (what the GEMM's own cast of the float32 weight
// gives) and every other value as it was; the GEMM's cast of the window
// hands it on unchanged with the whole weight's amax (delayed scaling's
// next scale is the one-rank run's, once the step's amaxes are reduced over
// the data group as the trainer does); the wire carries one byte per weight
// value and four per other value.
TEST(Fp8Mesh, ZeroThreeGathersWeightsInFp8Exactly) {
  using model::Linear;
  struct Piece {
    int64_t n;
    int linear;  // -1: float32 (a norm, a bias)
  };
  const std::vector<std::vector<Piece>> layout = {
      {{37, -1}, {24 * 13, int(Linear::qkv)}, {11, -1}, {20 * 25, int(Linear::proj)}},
      {{16 * 16, int(Linear::fc)}, {20, -1}}};
  std::vector<Segment> segments;
  std::vector<std::vector<model::Fp8ParamGather::Weight>> weights;
  int64_t numel = 0, cast = 0;
  for (const auto& seg : layout) {
    const int64_t begin = numel;
    weights.emplace_back();
    for (const Piece& p : seg) {
      if (p.linear >= 0)
        weights.back().push_back({numel - begin, numel - begin + p.n, {0, Linear(p.linear)}, true}), cast += p.n;
      numel += p.n;
    }
    segments.push_back({begin, numel});
  }
  F full = randf(numel, 11, 0.05);
  full[40] = 3.5f;           // the first weight's amax near its start (rank 0's shard)
  full[numel - 30] = -2.0f;  // the third's near its end (the last rank's)
  for (Fp8Recipe recipe : {Fp8Recipe::tensorwise, Fp8Recipe::delayed}) {
    const std::string name = recipe == Fp8Recipe::tensorwise ? "tensorwise" : "delayed";
    parallel::TensorParallel tp(nullptr, false);
    parallel::ContextParallel cp(nullptr, ContextMode::ring, 8);
    Fp8Config f;
    f.recipe = recipe, f.amax_history = 4;
    model::Fp8Linears mine(f, 1, {0}, tp, cp), one(f, 1, {0}, tp, cp);  // one: the float32 weights, whole
    model::Fp8ParamGather gather(mine, weights);
    parallel::CountedCommunicator counted(g_comm);
    parallel::ZeroStorage zero(&counted, segments, numel, 3, Device{}, nullptr, &gather, 0);
    std::copy(full.begin() + zero.shard_begin(), full.begin() + zero.shard_end(), zero.param_shard());
    for (int step = 0; step < 2; ++step) {  // delayed: the second step casts with the first's amaxes
      mine.set_training(true), one.set_training(true);
      const double before = counted.bytes();
      for (int s = 0; s < 2; ++s) {
        const float* window = zero.acquire_params(s, -1);
        const float* whole = full.data() + segments[size_t(s)].begin;
        for (const auto& w : weights[size_t(s)]) {
          const int64_t n = w.end - w.begin;
          F want(static_cast<size_t>(n)), got(want), handed(want);
          one.quantize(w.site, model::Operand::weight, whole + w.begin, 1, n, false, want.data());
          std::copy(window + w.begin, window + w.end, got.begin());
          mine.quantize(w.site, model::Operand::weight, window + w.begin, 1, n, false, handed.data());
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), size_t(n) * 4))
              << name << " step " << step << ": " << model::linear_name(w.site.linear) << " gathered";
          EXPECT_EQ(0, std::memcmp(handed.data(), want.data(), size_t(n) * 4))
              << name << ": " << model::linear_name(w.site.linear) << " handed to the GEMM";
        }
        for (int64_t i = 0, k = 0; i < segments[size_t(s)].size(); ++i) {  // the values outside the weights
          while (k < int64_t(weights[size_t(s)].size()) && weights[size_t(s)][size_t(k)].end <= i) ++k;
          const bool in = k < int64_t(weights[size_t(s)].size()) && weights[size_t(s)][size_t(k)].begin <= i;
          if (!in) EXPECT_EQ(window[i], whole[i]) << name << " segment " << s << " value " << i;
        }
        zero.release_params(s);
      }
      // the gathers' bytes, and tensorwise's all-reduce of an amax (a double) per weight
      const double n = g_world, amaxes = recipe == Fp8Recipe::tensorwise ? 3 * 8 * 2 * (n - 1) / n : 0;
      EXPECT_DOUBLE_EQ(counted.bytes() - before, double(cast + 4 * (numel - cast)) * (n - 1) / n + amaxes) << name;
      mine.end_step(g_comm), one.end_step(nullptr);  // the shards' amaxes reduced over the data group
    }
    if (recipe == Fp8Recipe::delayed) {  // each weight's history: the whole weight's amaxes
      const auto a = mine.state(), b = one.state();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].amaxes, b[i].amaxes) << model::linear_name(a[i].linear);
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
