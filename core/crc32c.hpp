// CRC-32C (Castagnoli), the checksum of checkpoint files: the SSE4.2
// instruction where the CPU has it (about 10 GB/s), a table otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trident {

// Running form: start from 0xFFFFFFFF, xor the end result with 0xFFFFFFFF.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_update(0xFFFFFFFFu, data, n) ^ 0xFFFFFFFFu; }
// Of a whole file, streamed (InputError if it cannot be opened).
uint32_t crc32c_file(const std::string& path);

}  // namespace trident
