// Expert parallelism's token exchange over real MPI processes (ctest runs it
// with 2, 4 and 8 ranks; the whole world is the expert group): every rank
// routes its own rows to experts at random (some experts get none, some
// ranks send nothing), dispatches them, each expert rank applies its
// experts, and the combine brings every row back. Each rank rebuilds every
// other rank's rows from the same seeds, so it knows exactly what must
// arrive, in which order.
#include <gtest/gtest.h>

#include <random>

#include "core/error.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "tests/mpi_test_main.hpp"

namespace trident::parallel {

MpiCommunicator* g_world = nullptr;

// Rank q's routed rows, expert-major: experts [M] and offsets [E+1]; rank
// 1 routes nothing, expert 1 receives nothing.
struct Routed {
  std::vector<int64_t> expert, offsets;
};
Routed routed(int q, int64_t E) {
  std::mt19937 rng(uint32_t(100 + q));
  const int64_t M = q == 1 ? 0 : int64_t(5 + rng() % 40);
  Routed r;
  for (int64_t i = 0; i < M; ++i) {
    int64_t e = int64_t(rng() % uint32_t(E));
    r.expert.push_back(e == 1 ? 0 : e);
  }
  std::sort(r.expert.begin(), r.expert.end());
  r.offsets.assign(size_t(E + 1), 0);
  for (int64_t e : r.expert) ++r.offsets[size_t(e + 1)];
  for (int64_t e = 0; e < E; ++e) r.offsets[size_t(e + 1)] += r.offsets[size_t(e)];
  return r;
}
// Row i of rank q, channel c: names all three.
double value(int q, int64_t i, int64_t c) { return double(q) * 1e6 + double(i) * 10 + double(c); }

TEST(ExpertParallel, DispatchArrivesByLocalExpertThenSourceAndCombineComesBack) {
  const int n = g_world->size(), me = g_world->rank();
  for (int64_t per_rank : {1, 3}) {
    const int64_t E = per_rank * n, C = 3;
    ExpertParallel ep(g_world, E);
    ASSERT_EQ(ep.local_experts(), per_rank);
    const Routed mine = routed(me, E);
    const int64_t M = int64_t(mine.expert.size());
    std::vector<double> rows(size_t(M * C));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < C; ++c) rows[size_t(i * C + c)] = value(me, i, c);
    const ExpertPlan plan = ep.plan(mine.offsets.data());
    Tensor staging;  // the exchanges' (ExpertParallel::dispatch)
    ASSERT_EQ(plan.rows, M);
    // what must arrive: for each local expert, each source's rows for it, in order
    std::vector<double> want;
    std::vector<int64_t> want_offsets{0};
    for (int64_t l = 0; l < per_rank; ++l) {
      const int64_t e = ep.first_expert() + l;
      for (int q = 0; q < n; ++q) {
        const Routed r = routed(q, E);
        for (int64_t i = r.offsets[size_t(e)]; i < r.offsets[size_t(e + 1)]; ++i)
          for (int64_t c = 0; c < C; ++c) want.push_back(value(q, i, c));
      }
      want_offsets.push_back(int64_t(want.size()) / C);
    }
    ASSERT_EQ(plan.received, int64_t(want.size()) / C);
    EXPECT_EQ(plan.local_offsets, want_offsets);
    std::vector<double> got(want.size(), -1.0);
    ep.dispatch(plan, got.data(), rows.data(), C, staging);
    EXPECT_EQ(got, want) << "rank " << me << ", " << per_rank << " experts per rank";
    // each expert scales its rows by (expert + 1); the combine returns them home
    for (int64_t l = 0; l < per_rank; ++l)
      for (int64_t r = plan.local_offsets[size_t(l)] * C; r < plan.local_offsets[size_t(l + 1)] * C; ++r)
        got[size_t(r)] *= double(ep.first_expert() + l + 1);
    std::vector<double> back(size_t(M * C), -1.0);
    ep.combine(plan, back.data(), got.data(), C, staging);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(back[size_t(i * C + c)], value(me, i, c) * double(mine.expert[size_t(i)] + 1))
            << "rank " << me << " row " << i;
    const ExpertTraffic t = ep.take_traffic();
    EXPECT_EQ(t.calls, 2);
    EXPECT_EQ(t.rows_sent, M + plan.received);
    EXPECT_EQ(t.rows_received, M + plan.received);
  }
}

// Every row to one expert of rank 0, from the first exchange of a fresh
// group on: the other ranks receive nothing (no staging yet, R = 0) and
// send everything, both ways; rank 0 sends nothing to them.
TEST(ExpertParallel, AllToOneFromTheFirstExchange) {
  const int n = g_world->size(), me = g_world->rank();
  const int64_t E = 2 * n, C = 2, M = 3 + me;
  ExpertParallel ep(g_world, E);
  std::vector<int64_t> offsets(size_t(E + 1), M);
  offsets[0] = 0;  // every row to expert 0
  std::vector<float> rows(size_t(M * C));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(me * 100 + int(i));
  const ExpertPlan plan = ep.plan(offsets.data());
  Tensor staging;  // the exchanges' (ExpertParallel::dispatch)
  const int64_t all = int64_t(n) * 3 + int64_t(n) * (n - 1) / 2;
  ASSERT_EQ(plan.received, me == 0 ? all : 0);
  std::vector<float> got(size_t(std::max<int64_t>(plan.received, 1) * C), -1.f);
  ep.dispatch(plan, got.data(), rows.data(), C, staging);
  for (float& x : got) x *= 2;
  std::vector<float> back(rows.size(), -1.f);
  ep.combine(plan, back.data(), got.data(), C, staging);
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(back[i], 2 * rows[i]) << "rank " << me << " element " << i;
}

// One rank (no group): the exchange is a copy, the layout the same.
TEST(ExpertParallel, OneRankIsTheIdentity) {
  const int64_t E = 4, C = 2;
  ExpertParallel ep(nullptr, E);
  const Routed r = routed(0, E);
  const int64_t M = int64_t(r.expert.size());
  std::vector<float> rows(size_t(M * C)), out(rows.size()), back(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  const ExpertPlan plan = ep.plan(r.offsets.data());
  Tensor staging;  // the exchanges' (ExpertParallel::dispatch)
  EXPECT_EQ(plan.local_offsets, r.offsets);
  ep.dispatch(plan, out.data(), rows.data(), C, staging);
  EXPECT_EQ(out, rows);
  ep.combine(plan, back.data(), out.data(), C, staging);
  EXPECT_EQ(back, rows);
  EXPECT_THROW(ExpertParallel(g_world, g_world->size() + 1), Error);
}

}  // namespace trident::parallel

int main(int argc, char** argv) {
  return trident::test::run_mpi_tests(argc, argv,
                                      [](trident::parallel::MpiCommunicator& w) { trident::parallel::g_world = &w; });
}
