// The rank's CUDA context and caching device allocator (see
// core/device_memory.hpp).
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "core/device_memory.hpp"
#include "core/error.hpp"

#define CUDA_CHECK(stmt) TRIDENT_LIBRARY_CHECK("CUDA", stmt, cudaSuccess, cudaGetErrorString)

namespace trident {

namespace {

struct Context {
  std::mutex mutex;
  int device = -1;
  cudaStream_t stream = nullptr;
  std::multimap<size_t, void*> cached;  // rounded size -> free block
  std::map<uintptr_t, size_t> blocks;   // every block held from CUDA -> its rounded size
  std::atomic<int64_t> live_blocks{0};
  MemStats stats;
  int64_t reserved = 0;
};

Context& ctx() {
  static Context c;
  return c;
}

size_t round_size(size_t bytes) {
  if (bytes < (size_t(1) << 20)) return (bytes + 511) / 512 * 512;
  const size_t two_mib = size_t(2) << 20;
  return (bytes + two_mib - 1) / two_mib * two_mib;
}

void ensure_bound(int device) {
  Context& c = ctx();
  if (c.device == device && c.stream) return;
  TRIDENT_CHECK(c.device < 0 || c.device == device, "this process is bound to cuda:{}, asked for cuda:{}", c.device,
                device);
  set_device(device);
}

void release_cache_locked(Context& c) {
  for (auto& [size, p] : c.cached) {
    cudaFree(p);
    c.blocks.erase(reinterpret_cast<uintptr_t>(p));
    c.reserved -= int64_t(size);
  }
  c.cached.clear();
}

}  // namespace

bool device_memory_available() { return device_count() > 0; }

int64_t device_total_bytes() {
  if (ctx().device < 0) return 0;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return int64_t(total);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

void set_device(int device) {
  Context& c = ctx();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.device == device && c.stream) return;
  TRIDENT_CHECK(c.device < 0, "this process is already bound to cuda:{}", c.device);
  const int n = device_count();
  if (device < 0 || device >= n)
    throw Error(fmt::format("cuda:{} does not exist: this machine has {} CUDA device(s)", device, n));
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  c.device = device;
}

int current_device() { return ctx().device; }

void* compute_stream() {
  Context& c = ctx();
  TRIDENT_CHECK(c.stream != nullptr, "no CUDA device bound (set_device first)");
  return c.stream;
}

void device_synchronize() {
  Context& c = ctx();
  if (c.stream) CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

void* device_alloc(size_t bytes, int device, MemCategory cat) {
  ensure_bound(device);
  Context& c = ctx();
  const size_t rounded = round_size(std::max<size_t>(bytes, 1));
  std::lock_guard<std::mutex> lock(c.mutex);
  void* p = nullptr;
  // a cached block of this size, or up to twice it (larger blocks stay for larger requests)
  auto it = c.cached.lower_bound(rounded);
  if (it != c.cached.end() && it->first <= 2 * rounded) {
    p = it->second;
    c.cached.erase(it);
  } else {
    cudaError_t e = cudaMalloc(&p, rounded);
    if (e != cudaSuccess) {  // give the cache back and try once more
      cudaGetLastError();
      cudaStreamSynchronize(c.stream);
      release_cache_locked(c);
      e = cudaMalloc(&p, rounded);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format("cuda:{}: out of memory allocating {} bytes for {} ({} bytes in use, {} held; {})",
                              device, bytes, mem_category_name(cat), c.stats.total_current, c.reserved,
                              cudaGetErrorString(e)));
    }
    c.blocks[reinterpret_cast<uintptr_t>(p)] = rounded;
    c.reserved += int64_t(rounded);
    c.live_blocks.fetch_add(1);
  }
  const int i = int(cat);
  c.stats.current[size_t(i)] += int64_t(bytes);
  c.stats.total_current += int64_t(bytes);
  c.stats.peak[size_t(i)] = std::max(c.stats.peak[size_t(i)], c.stats.current[size_t(i)]);
  c.stats.total_peak = std::max(c.stats.total_peak, c.stats.total_current);
  return p;
}

void device_free(void* p, size_t bytes, int, MemCategory cat) {
  if (!p) return;
  Context& c = ctx();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto b = c.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (b == c.blocks.end()) return;
  c.cached.insert({b->second, p});  // reused in stream order: later work on the stream runs after earlier work
  c.stats.current[size_t(cat)] -= int64_t(bytes);
  c.stats.total_current -= int64_t(bytes);
}

MemStats device_memory_stats() {
  Context& c = ctx();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void device_reset_peaks() {
  Context& c = ctx();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak = c.stats.current;
  c.stats.total_peak = c.stats.total_current;
}

int64_t device_reserved_bytes() {
  Context& c = ctx();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.reserved;
}

void device_empty_cache() {
  Context& c = ctx();
  if (c.stream) cudaStreamSynchronize(c.stream);
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cache_locked(c);
}

bool is_device_pointer(const void* p) {
  Context& c = ctx();
  if (c.live_blocks.load(std::memory_order_relaxed) == 0 || !p) return false;
  const auto u = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.blocks.upper_bound(u);
  if (it == c.blocks.begin()) return false;
  --it;
  return u < it->first + it->second;
}

void device_memset_zero(void* p, size_t bytes, int device) {
  ensure_bound(device);
  if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx().stream));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  const bool dst_dev = is_device_pointer(dst), src_dev = is_device_pointer(src);
  if (!dst_dev && !src_dev) {
    std::memmove(dst, src, bytes);
    return;
  }
  cudaStream_t s = ctx().stream;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  if (!dst_dev || !src_dev) CUDA_CHECK(cudaStreamSynchronize(s));  // the host side may be reused or read now
}

void copy_to_device(void* dst, const void* src, size_t bytes, int device) {
  ensure_bound(device);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx().stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
}

void copy_to_host(void* dst, const void* src, size_t bytes, int device) {
  ensure_bound(device);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx().stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
}

}  // namespace trident
