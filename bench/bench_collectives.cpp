// Collective bandwidth over MPI, reported like nccl-tests: for each size,
// verify the result first, then time it; columns size count type time algbw
// busbw #wrong. busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for
// reduce-scatter and all-gather. Run under mpirun, e.g.
//   mpirun -np 2 build/bench/bench_collectives [max_bytes]
// The memory-copy bandwidth of one rank is printed first as the limit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "parallel/mpi/mpi_communicator.hpp"

using namespace trident;
using namespace trident::parallel;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

static double memcpy_bandwidth() {
  const size_t n = size_t(256) << 20;
  std::vector<char> a(n, 1), b(n, 2);
  std::memcpy(b.data(), a.data(), n);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, double(n) / seconds_since(t0));
  }
  return best;  // bytes read (= bytes written) per second
}

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  auto world = MpiCommunicator::world();
  const int n = world->size(), r = world->rank();
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (int64_t(64) << 20);
  if (r == 0) {
    std::printf("# ranks %d | memcpy bandwidth of one rank %.2f GB/s (256 MiB, best of 5)\n", n,
                memcpy_bandwidth() / 1e9);
  }
  world->barrier()->wait();
  const char* ops[] = {"all_reduce", "reduce_scatter", "all_gather"};
  for (const char* op : ops) {
    if (r == 0)
      std::printf("# %s\n# %12s %12s %6s %10s %10s %10s %7s\n", op, "size(B)", "count", "type", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    const bool ar = std::strcmp(op, "all_reduce") == 0, rs = std::strcmp(op, "reduce_scatter") == 0;
    const double factor = ar ? 2.0 * (n - 1) / n : double(n - 1) / n;
    for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4 / n * n;  // divisible, as nccl-tests
      Tensor buf = Tensor::empty({count}, DType::f32, MemCategory::comm);
      Tensor out = Tensor::empty({count / n}, DType::f32, MemCategory::comm);
      float* p = buf.data<float>();
      auto fill = [&] {
        for (int64_t i = 0; i < count; ++i) p[i] = float((i % 7) + r);
      };
      auto run = [&] {
        if (ar)
          world->all_reduce(buf)->wait();
        else if (rs)
          world->reduce_scatter(out, buf)->wait();
        else
          world->all_gather(buf)->wait();
      };
      // verify
      fill();
      run();
      int64_t wrong = 0;
      const int64_t mine = r * (count / n);
      for (int64_t i = 0; i < (ar ? count : count / n); ++i) {
        int64_t gi = ar ? i : mine + i;
        float expect = ar || rs ? float(n * (gi % 7) + n * (n - 1) / 2) : float((gi % 7) + gi / (count / n));
        float got = ar ? p[i] : rs ? out.data<float>()[i] : p[gi];
        if (got != expect) ++wrong;
      }
      if (!ar && !rs)  // all_gather: check every rank's chunk
        for (int64_t i = 0; i < count; ++i)
          if (p[i] != float((i % 7) + i / (count / n))) ++wrong;
      // time
      const int iters = bytes < (1 << 20) ? 200 : 20;
      world->barrier()->wait();
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) run();
      double t = seconds_since(t0) / iters;
      double algbw = double(count * 4) / t / 1e9;
      if (r == 0)
        std::printf("  %12lld %12lld %6s %10.1f %10.3f %10.3f %7lld\n", (long long)(count * 4), (long long)count,
                    "float", t * 1e6, algbw, algbw * factor, (long long)wrong);
    }
  }
  world.reset();
  return 0;
}
