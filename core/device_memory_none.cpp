// Device memory in a build without CUDA: every call refuses clearly.
#include "core/device_memory.hpp"
#include "core/error.hpp"

namespace trident {

static constexpr const char* kNoCuda = "this build has no CUDA backend (configure with TRIDENT_CUDA=ON on a machine "
                                       "with the CUDA toolkit)";
bool device_memory_available() { return false; }
void* device_alloc(size_t, int) { throw Error(kNoCuda); }
void device_free(void*, int) {}
void device_memset_zero(void*, size_t, int) { throw Error(kNoCuda); }
void copy_to_device(void*, const void*, size_t, int) { throw Error(kNoCuda); }
void copy_to_host(void*, const void*, size_t, int) { throw Error(kNoCuda); }
int device_count() { return 0; }

}  // namespace trident
