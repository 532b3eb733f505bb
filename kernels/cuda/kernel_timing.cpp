// Per-kernel GPU time (see cuda_kernels.hpp: KernelTimer): CUDA events
// around each dispatched call, from a reused pool, read at report time.
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/device_memory.hpp"
#include "kernels/cuda/cuda_kernels.hpp"

namespace trident::kernels::cuda {

namespace {

struct Pending {
  const char* name;
  cudaEvent_t start, end;
};

struct Timing {
  bool enabled =
      std::getenv("TRIDENT_KERNEL_TIMES") != nullptr && std::string(std::getenv("TRIDENT_KERNEL_TIMES")) != "0";
  std::vector<cudaEvent_t> free_events;
  std::vector<Pending> pending;
};

Timing& timing() {
  static Timing t;
  return t;
}

cudaEvent_t take_event() {
  Timing& t = timing();
  if (!t.free_events.empty()) {
    cudaEvent_t e = t.free_events.back();
    t.free_events.pop_back();
    return e;
  }
  cudaEvent_t e;
  cudaEventCreate(&e);
  return e;
}

}  // namespace

bool kernel_timing_enabled() { return timing().enabled; }
void set_kernel_timing(bool on) { timing().enabled = on; }

KernelTimer::KernelTimer(const char* name) : name_(name) {
  if (!timing().enabled || current_device() < 0) return;
  start_ = take_event();
  cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(compute_stream()));
}

KernelTimer::~KernelTimer() {
  if (!start_) return;
  cudaEvent_t end = take_event();
  cudaEventRecord(end, static_cast<cudaStream_t>(compute_stream()));
  timing().pending.push_back({name_, static_cast<cudaEvent_t>(start_), end});
}

std::vector<std::pair<std::string, double>> take_kernel_times() {
  Timing& t = timing();
  std::map<std::string, double> sums;
  if (!t.pending.empty()) cudaEventSynchronize(t.pending.back().end);
  for (const Pending& p : t.pending) {
    float ms = 0;
    cudaEventElapsedTime(&ms, p.start, p.end);
    sums[p.name] += double(ms) / 1e3;
    t.free_events.push_back(p.start);
    t.free_events.push_back(p.end);
  }
  t.pending.clear();
  return {sums.begin(), sums.end()};
}

}  // namespace trident::kernels::cuda
