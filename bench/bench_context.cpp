// Context-parallel attention alone: forward and backward time per rank,
// bytes each rank sends and the communication time the attention did not
// hide (ContextParallel::traffic()), for the world as one context group.
// Run under mpirun with 1, 2 or 4 ranks and compare the lines, e.g.
//   mpirun -np 2 build/bench/bench_context [seq_len=8192] [ring|all_to_all] [heads=4] [kv_heads=4] [head_dim=64]
// One sequence (B = 1); each rank holds seq_len / ranks rows. Times are the
// slowest rank's median over the repetitions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "parallel/context_parallel.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/rank_reductions.hpp"

using namespace trident;
using namespace trident::parallel;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  auto world = MpiCommunicator::world();
  const int n = world->size(), rank = world->rank();
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 8192;
  const std::string mode_name = argc > 2 ? argv[2] : "ring";
  const int64_t H = argc > 3 ? std::atoll(argv[3]) : 4, KV = argc > 4 ? std::atoll(argv[4]) : H;
  const int64_t D = argc > 5 ? std::atoll(argv[5]) : 64, B = 1;
  const ContextMode mode = mode_name == "all_to_all" ? ContextMode::all_to_all : ContextMode::ring;
  ContextParallel cp(world.get(), mode, T);
  const int64_t Tl = cp.local_len(), W = (H + 2 * KV) * D;
  std::mt19937 gen(uint32_t(1234 + rank));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> qkv(size_t(B * Tl * W)), dout(size_t(B * Tl * H * D)), out(dout.size()), dqkv(qkv.size());
  std::vector<float> lse(size_t(B * H * Tl));
  for (float& x : qkv) x = nd(gen);
  for (float& x : dout) x = nd(gen);
  AttentionArgs<float> args;
  args.B = B, args.H = H, args.KV = KV, args.D = args.Dv = D;
  auto fwd = [&] { cp.attention_forward(out.data(), lse.data(), qkv.data(), args); };
  auto bwd = [&] { cp.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), args); };
  fwd(), bwd();  // warm: buffers allocated, pages touched
  const int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  std::vector<double> tf, tb;
  const ContextTraffic before = cp.traffic();
  for (int i = 0; i < reps; ++i) {
    world->barrier()->wait();
    auto t0 = Clock::now();
    fwd();
    tf.push_back(since(t0));
    world->barrier()->wait();
    t0 = Clock::now();
    bwd();
    tb.push_back(since(t0));
  }
  const ContextTraffic after = cp.traffic();
  std::sort(tf.begin(), tf.end());
  std::sort(tb.begin(), tb.end());
  const double f = max_over(world.get(), tf[tf.size() / 2]), b = max_over(world.get(), tb[tb.size() / 2]);
  const double exposed = max_over(world.get(), (after.exposed_s - before.exposed_s) / reps);
  const double bytes = max_over(world.get(), double(after.bytes - before.bytes) / reps);
  // causal attention work of this rank: forward 2 matmuls, backward 5, over half the T x T scores, / ranks
  const double flops = 7.0 * 2 * double(B) * double(H) * double(T) * double(T) * double(D) / 2 / n;
  if (rank == 0)
    std::printf(
        "context %d %-10s T %lld H %lld KV %lld D %lld | forward %8.2f ms | backward %8.2f ms | %6.1f GFLOP/s "
        "per rank | sent %8.2f MB per fwd+bwd | exposed comm %7.2f ms (%4.1f%% of the step)\n",
        n, n == 1 ? "-" : mode_name.c_str(), (long long)T, (long long)H, (long long)KV, (long long)D, 1e3 * f, 1e3 * b,
        flops / (f + b) / 1e9, bytes / 1e6, 1e3 * exposed, 100 * exposed / (f + b));
  return 0;
}
