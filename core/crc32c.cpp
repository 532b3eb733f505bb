// CRC-32C, see crc32c.hpp.
#include "core/crc32c.hpp"

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

#include <array>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace trident {

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__SSE4_2__)
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  crc = uint32_t(c);
  for (; n > 0; ++p, --n) crc = _mm_crc32_u8(crc, *p);
  return crc;
#else
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (; n > 0; ++p, --n) crc = table[(crc ^ *p) & 0xff] ^ (crc >> 8);
  return crc;
#endif
}

uint32_t crc32c_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail_input("{}: cannot open", path);
  uint32_t crc = 0xFFFFFFFFu;
  std::vector<char> buf(size_t(4) << 20);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32c_update(crc, buf.data(), size_t(f.gcount()));
  }
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace trident
