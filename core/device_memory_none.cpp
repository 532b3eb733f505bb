// Device memory in a build without CUDA: every call refuses clearly; the
// queries answer "none".
#include <cstring>

#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident {

static constexpr const char* kNoCuda =
    "this build has no CUDA backend (configure with TRIDENT_CUDA=ON on a machine "
    "with the CUDA toolkit)";
bool device_memory_available() { return false; }
int device_count() { return 0; }
void set_device(int) { throw Error(kNoCuda); }
int current_device() { return -1; }
void* compute_stream() { return nullptr; }
void device_synchronize() {}
void* device_alloc(size_t, int, MemCategory) { throw Error(kNoCuda); }
void device_free(void*, size_t, int, MemCategory) {}
MemStats device_memory_stats() { return {}; }
void device_reset_peaks() {}
int64_t device_reserved_bytes() { return 0; }
int64_t device_total_bytes() { return 0; }
void device_empty_cache() {}
bool is_device_pointer(const void*) { return false; }
void device_memset_zero(void*, size_t, int) { throw Error(kNoCuda); }
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void copy_to_device(void*, const void*, size_t, int) { throw Error(kNoCuda); }
void copy_to_host(void*, const void*, size_t, int) { throw Error(kNoCuda); }

}  // namespace trident
