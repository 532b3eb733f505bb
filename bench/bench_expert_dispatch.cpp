// Expert parallelism's token exchange against the expert compute it feeds:
// one MoE layer's forward on every rank of an expert group (the world),
// each rank routing its own N tokens to k of E experts (uniformly at
// random, a fixed seed per rank), then
//   dispatch   parallel::ExpertParallel (one all_to_all, the re-layout)
//   experts    the grouped GEMMs of the rows this rank's E / n experts
//              received: gate|up [rows, 2I], SwiGLU, down [rows, C]
//   combine    the reverse exchange
// Reported per rank, medians of `reps` alternating passes after a warm-up:
// the bytes the exchanges moved (sent + received, fp32), their time, the
// experts' time and the exchanges' share of the layer's routed part.
//   mpirun -np 8 build/bench/bench_expert_dispatch [tokens=2048] [k=2] [experts=16] [hidden=512] [ffn=1024] [reps=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_permute.hpp"
#include "parallel/expert_parallel.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

using namespace trident;
using Clock = std::chrono::steady_clock;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  auto world = parallel::MpiCommunicator::world();
  std::map<std::string, int64_t> a{{"tokens", 2048}, {"k", 2},      {"experts", 16},
                                   {"hidden", 512},  {"ffn", 1024}, {"reps", 7}};
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    const std::string key = eq == std::string::npos ? s : s.substr(0, eq),
                      value = eq == std::string::npos ? "" : s.substr(eq + 1);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!a.count(key) || value.empty() || used != value.size() || v < 1) {
      if (world->rank() == 0)
        std::fprintf(stderr,
                     "bench_expert_dispatch: '%s': expected key=N with N >= 1 and key one of tokens, k, "
                     "experts, hidden, ffn, reps\n",
                     argv[i]);
      return 2;
    }
    a[key] = v;
  }
  const int64_t N = a["tokens"], K = a["k"], E = a["experts"], C = a["hidden"], I = a["ffn"], reps = a["reps"];
  const int n = world->size(), me = world->rank();
  if (E % n != 0 || K > E) {
    if (me == 0)
      std::fprintf(stderr, "bench_expert_dispatch: experts(%lld) %% ranks(%d) != 0 or k > experts\n",
                   static_cast<long long>(E), n);
    return 2;
  }
  parallel::ExpertParallel ep(world.get(), E);
  const int64_t L = ep.local_experts(), M = N * K;
  // routes: k distinct experts per token, increasing
  std::mt19937 rng(uint32_t(17 + me));
  std::vector<int32_t> expert, ids(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t e = 0; e < E; ++e) ids[size_t(e)] = int32_t(e);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::sort(ids.begin(), ids.begin() + K);
    expert.insert(expert.end(), ids.begin(), ids.begin() + K);
  }
  std::vector<int32_t> row(static_cast<size_t>(M)), token(row.size());
  std::vector<int64_t> offsets(static_cast<size_t>(E + 1));
  kernels::moe_route_index(row.data(), token.data(), offsets.data(), expert.data(), N, K, E);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> h(static_cast<size_t>(N * C)), w_in(static_cast<size_t>(L * 2 * I * C)),
      w_out(static_cast<size_t>(L * C * I));
  for (auto* v : {&h, &w_in, &w_out})
    for (float& x : *v) x = 0.05f * d(rng);
  std::vector<float> x(static_cast<size_t>(M * C)), back(x.size());
  kernels::moe_permute(x.data(), h.data(), token.data(), M, C);
  const parallel::ExpertPlan plan = ep.plan(offsets.data());
  Tensor staging;  // the exchanges' (ExpertParallel::dispatch)
  const int64_t R = plan.received;
  std::vector<float> recv(static_cast<size_t>(std::max<int64_t>(R, 1) * C)), fc(static_cast<size_t>(R * 2 * I + 1)),
      act(static_cast<size_t>(R * I + 1)), y(recv.size());
  std::vector<double> t_exchange, t_experts;
  for (int64_t rep = 0; rep <= reps; ++rep) {
    world->barrier()->wait();
    auto t0 = Clock::now();
    ep.dispatch(plan, recv.data(), x.data(), C, staging);
    auto t1 = Clock::now();
    kernels::grouped_linear_forward(fc.data(), recv.data(), w_in.data(), plan.local_offsets.data(), L, C, 2 * I);
    kernels::swiglu_forward(act.data(), fc.data(), R, I);
    kernels::grouped_linear_forward(y.data(), act.data(), w_out.data(), plan.local_offsets.data(), L, I, C);
    auto t2 = Clock::now();
    ep.combine(plan, back.data(), y.data(), C, staging);
    auto t3 = Clock::now();
    if (rep == 0) continue;  // warm-up
    t_exchange.push_back(std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count());
    t_experts.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const parallel::ExpertTraffic traffic = ep.take_traffic();
  const double bytes = double(traffic.rows_sent + traffic.rows_received) * double(C) * 4 / double(reps + 1);
  const double ex = median(t_exchange), co = median(t_experts);
  // every rank's line, rank 0 first
  char line[256];
  std::snprintf(line, sizeof(line),
                "rank %d: rows out %lld in %lld | exchange %.3f ms (%.1f MB moved, %.0f MB/s) | experts %.3f ms | "
                "exchange share %.1f%%",
                me, static_cast<long long>(M), static_cast<long long>(R), ex * 1e3, bytes / 1e6, bytes / ex / 1e6,
                co * 1e3, 100 * ex / (ex + co));
  std::vector<char> all(size_t(n) * sizeof(line));
  MPI_Gather(line, sizeof(line), MPI_CHAR, all.data(), sizeof(line), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<double> mine{ex, co}, sums(2);
  MPI_Reduce(mine.data(), sums.data(), 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (me == 0) {
    std::printf(
        "expert dispatch + combine: %d ranks, %lld tokens x top %lld per rank, %lld experts (%lld per rank), "
        "hidden %lld, expert ffn %lld, %lld reps\n",
        n, static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(E), static_cast<long long>(L),
        static_cast<long long>(C), static_cast<long long>(I), static_cast<long long>(reps));
    for (int q = 0; q < n; ++q) std::printf("%s\n", all.data() + size_t(q) * sizeof(line));
    std::printf("max over ranks: exchange %.3f ms, experts %.3f ms, exchange share %.1f%%\n", sums[0] * 1e3,
                sums[1] * 1e3, 100 * sums[0] / (sums[0] + sums[1]));
  }
  world.reset();
  return 0;
}
