// Host allocator with byte accounting per category and peak per category.
// Every long-lived buffer (parameters, gradients, optimizer state, activation
// contexts, communication buffers) is allocated through here, so a run can
// report and a test can check the exact bytes each category holds. Memory is
// 64-byte aligned. Not a caching allocator: the hot loop allocates nothing.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trident {

enum class MemCategory : uint8_t { params, grads, optimizer, activations, comm, other };
inline constexpr int kMemCategories = 6;

std::string_view mem_category_name(MemCategory c);

struct MemStats {
  std::array<int64_t, kMemCategories> current{};
  std::array<int64_t, kMemCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

class HostAllocator {
 public:
  static HostAllocator& instance();
  void* allocate(size_t bytes, MemCategory cat);
  void release(void* p, size_t bytes, MemCategory cat);
  MemStats stats() const;
  // Peaks restart from the current values (e.g. after start-up).
  void reset_peaks();

 private:
  MemStats stats_;
};

}  // namespace trident
