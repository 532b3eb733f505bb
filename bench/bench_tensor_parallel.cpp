// Tensor-parallel layer cost: forward + backward time of one transformer
// layer and the bytes its region ops move, with and without sequence
// parallelism, against the analytic count. Run under mpirun; the world is
// the tensor group:
//   mpirun -np 1 build/bench/bench_tensor_parallel [recipe] [key=value ...]
//   mpirun -np 2 build/bench/bench_tensor_parallel [recipe] [key=value ...]
// Per layer = (5-layer model - 1-layer model) / 4, for the time (median of
// `reps` fwd+bwd passes) and for the bytes (exact), so the embedding, head
// and loss drop out. Analytic count per layer per micro-batch of N = B x T
// rows and C channels, fp32: without sequence parallelism 4 all-reduces of
// N x C; with it 4 all-gathers and 4 reduce-scatters of N x C (full-buffer
// sizes; on the wire a ring moves 2(t-1)/t of an all-reduce's buffer and
// (t-1)/t of the others', so both variants send the same bytes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "kernels/gemm.hpp"
#include "model/transformer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

using namespace trident;
using Clock = std::chrono::steady_clock;

struct Cost {
  double seconds;
  parallel::TensorTraffic traffic;
};

// Median fwd+bwd time and the traffic of one pass, for a model of `layers`.
static Cost measure(ModelConfig m, int64_t layers, int64_t B, bool sp, parallel::MpiCommunicator& world, int reps) {
  m.layers = layers;
  parallel::TensorParallel tp(&world, sp);
  model::Transformer<float> net(m, 1, {.tp = &tp});
  auto ctx = net.make_activations(B, model::Recompute::none);
  const int64_t N = B * m.seq_len;
  std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    tokens[size_t(i)] = int32_t((i * 7919) % m.vocab), targets[size_t(i)] = int32_t((i * 104729 + 1) % m.vocab);
  auto pass = [&] {
    net.forward(*ctx, tokens.data(), targets.data(), 1.0f / float(N));
    net.backward(*ctx, model::Recompute::none, false);
  };
  pass();  // warm-up (first touch of the buffers)
  tp.reset_traffic();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    world.barrier()->wait();
    auto t0 = Clock::now();
    pass();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Cost c;
  c.traffic = tp.traffic();
  c.traffic.all_reduce /= reps, c.traffic.all_gather /= reps, c.traffic.reduce_scatter /= reps;
  c.traffic.calls /= reps, c.traffic.seconds /= reps;
  std::sort(times.begin(), times.end());
  c.seconds = times[times.size() / 2];
  return c;
}

int main(int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  auto world = parallel::MpiCommunicator::world();
  const int t = world->size();
  std::string recipe = std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt2-124m.yaml";
  // a small vocabulary: the head is not part of a layer, and its noise would swamp the difference
  std::vector<std::string> sets = {"model.seq_len=256", "train.micro_batch=4", "model.vocab=1024",
                                   "data.synthetic.vocab=1024"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find('=') == std::string::npos)
      recipe = a;
    else
      sets.push_back(a);
  }
  sets.push_back("parallel.tensor=" + std::to_string(t));
  sets.push_back("parallel.data=1");
  Recipe rc;
  try {
    rc = load_recipe(recipe, sets, t);
  } catch (const InputError& e) {
    if (world->rank() == 0) std::fprintf(stderr, "bench_tensor_parallel: %s\n", e.what());
    return 2;
  }
  const ModelConfig& m = rc.model;
  const int64_t B = rc.train.micro_batch, N = B * m.seq_len, C = m.hidden;
  const int reps = 7;
  if (world->rank() == 0) {
    std::printf(
        "# tensor %d | %s: hidden %lld, heads %lld/%lld, ffn %lld | micro-batch %lld x seq %lld = %lld rows | "
        "%d threads per rank\n",
        t, enum_name(m.arch), (long long)C, (long long)m.heads, (long long)m.kv_heads, (long long)m.ffn_hidden,
        (long long)B, (long long)m.seq_len, (long long)N, kernels::num_threads());
    std::printf("# %-8s %10s %10s %14s %14s %14s %14s %8s\n", "seq_par", "layer_ms", "comm_ms", "all_reduce_B",
                "all_gather_B", "reduce_scat_B", "analytic_B", "match");
  }
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    Cost one = measure(m, 1, B, sp, *world, reps), five = measure(m, 5, B, sp, *world, reps);
    const double ms = (five.seconds - one.seconds) / 4 * 1e3;
    const double comm_ms = (five.traffic.seconds - one.traffic.seconds) / 4 * 1e3;  // mean, not median
    const int64_t ar = (five.traffic.all_reduce - one.traffic.all_reduce) / 4 * 4;
    const int64_t ag = (five.traffic.all_gather - one.traffic.all_gather) / 4 * 4;
    const int64_t rs = (five.traffic.reduce_scatter - one.traffic.reduce_scatter) / 4 * 4;
    const int64_t bytes = 4 * N * C * 4;  // four N x C fp32 buffers of each kind
    const bool match = t == 1 ? ar + ag + rs == 0
                       : sp   ? (ar == 0 && ag == bytes && rs == bytes)
                              : (ar == bytes && ag + rs == 0);
    if (world->rank() == 0)
      std::printf("  %-8s %10.2f %10.2f %14lld %14lld %14lld %14lld %8s\n", sp ? "on" : "off", ms, comm_ms,
                  (long long)ar, (long long)ag, (long long)rs, t == 1 ? 0LL : (long long)bytes, match ? "yes" : "NO");
  }
  return 0;
}
