// Checkpoint save and load throughput against a plain sequential write and
// read of the same bytes on the same disk, measured in the same run (the
// machine and its disk are shared). One process, the recipe's model
// (default GPT-2 124M): parameters and both AdamW moments, fp32. The
// synchronous save's time is what a step would stall without the background
// writer; the background save stalls the step only for start() (the copy to
// host buffers), then writes while the caller goes on.
//   build/bench/bench_checkpoint [recipe] [dir]     (dir default: build/bench_ckpt)
// Reads are served from the page cache in both cases (no cache drop without
// privileges on shared machines); the write side includes fsync.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "model/params.hpp"

using namespace trident;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int main(int argc, char** argv) {
  const std::string recipe = argc > 1 ? argv[1] : std::string(TRIDENT_SOURCE_DIR) + "/configs/gpt2-124m.yaml";
  const std::string dir = argc > 2 ? argv[2] : std::string("bench_ckpt");
  std::filesystem::remove_all(dir);
  Recipe rc = load_recipe(recipe, {"checkpoint.dir=" + dir, "checkpoint.keep=1"}, 1);
  model::ParamRegistry reg(rc.model);
  const int64_t n = reg.total();
  std::vector<float> p(static_cast<size_t>(n)), m(p.size(), 0.001f), v(p.size(), 1e-6f);
  reg.initialize(p.data(), 1);
  launch::RankState s{&reg, 0, 0, 0, 0, n, p.data(), m.data(), v.data()};
  const double bytes = 3.0 * double(n) * 4;
  std::printf("# %s: %.1fM parameters, %.1f MB of state (params, exp_avg, exp_avg_sq, fp32)\n", rc.source.c_str(),
              double(n) / 1e6, bytes / 1e6);
  std::printf("# %-22s %10s %10s %12s\n", "operation", "seconds", "GB/s", "vs plain I/O");
  // one saver for the run, as in training: its host buffers are allocated
  // and touched once, at start-up
  launch::CheckpointSaver saver(rc, nullptr);
  saver.reserve(n);
  for (int rep = 0; rep < 3; ++rep) {
    // plain sequential write + fsync, then read, of the same bytes
    const std::string plain = dir + "/plain.bin";
    std::filesystem::create_directories(dir);
    auto t0 = Clock::now();
    int fd = ::open(plain.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (auto* b : {&p, &m, &v})
      if (::write(fd, b->data(), b->size() * 4) < 0) std::perror("write");
    ::fsync(fd);
    ::close(fd);
    const double w_plain = since(t0);
    std::vector<float> back(p.size());
    t0 = Clock::now();
    fd = ::open(plain.c_str(), O_RDONLY);
    for (int i = 0; i < 3; ++i)
      if (::read(fd, back.data(), back.size() * 4) < 0) std::perror("read");
    ::close(fd);
    const double r_plain = since(t0);
    std::filesystem::remove(plain);

    t0 = Clock::now();
    const std::string saved = launch::save_checkpoint(rc, 2 * rep + 1, s, nullptr);
    const double w = since(t0);
    std::vector<float> p2(p.size()), m2(p.size()), v2(p.size());
    launch::RankState into{&reg, 0, 0, 0, 0, n, p2.data(), m2.data(), v2.data()};
    t0 = Clock::now();
    launch::load_checkpoint(rc, saved, into, nullptr);
    const double r = since(t0);
    if (p2 != p || v2 != v) std::printf("MISMATCH after load\n");
    // the background writer: the stall is start(); finish() waits for the files
    t0 = Clock::now();
    saver.start(2 * rep + 2, s);
    const double stall = since(t0);
    while (saver.poll().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a training loop's polls
    const double bg = since(t0);
    std::printf("  %-22s %10.3f %10.2f %12s\n", "plain write + fsync", w_plain, bytes / w_plain / 1e9, "1.00x");
    std::printf("  %-22s %10.3f %10.2f %11.2fx\n", "checkpoint save", w, bytes / w / 1e9, w_plain / w);
    std::printf("  %-22s %10.3f %10s %11.2fx\n", "background save stall", stall, "-", w / stall);
    std::printf("  %-22s %10.3f %10.2f %11.2fx\n", "background save total", bg, bytes / bg / 1e9, w_plain / bg);
    std::printf("  %-22s %10.3f %10.2f %12s\n", "plain read", r_plain, bytes / r_plain / 1e9, "1.00x");
    std::printf("  %-22s %10.3f %10.2f %11.2fx\n", "checkpoint load", r, bytes / r / 1e9, r_plain / r);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
