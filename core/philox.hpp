// Philox 4x32-10 counter-based RNG (Salmon et al., SC'11) and the
// mesh-independent parameter initialisation built on it.
// A stream is keyed by (seed, name): parameter "transformer.h.3.attn.c_attn.weight"
// has its own key, and element i of its *global* (unsharded) layout uses
// counter i. Any shard can therefore generate its elements alone and get the
// values the single-rank model has. Normals come from Box-Muller on the first
// two 32-bit outputs of one counter; the other two are unused (simplicity over
// throughput: initialisation is not in the hot loop).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace trident {

using PhiloxKey = std::array<uint32_t, 2>;
using PhiloxBlock = std::array<uint32_t, 4>;

inline PhiloxBlock philox4x32_10(PhiloxBlock ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * ctr[0];
    uint64_t p1 = uint64_t(kM1) * ctr[2];
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// 64-bit FNV-1a of the name, mixed with the seed by splitmix64.
inline PhiloxKey philox_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  uint64_t z = h ^ (seed + 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return {uint32_t(z), uint32_t(z >> 32)};
}

// The block for 64-bit counter `index` in sub-stream `stream`.
inline PhiloxBlock philox_at(PhiloxKey key, uint64_t index, uint32_t stream = 0) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), stream, 0}, key);
}

// Uniform in (0, 1], never 0 (safe for log).
inline double u32_to_unit(uint32_t x) { return (double(x) + 1.0) / 4294967296.0; }

inline double philox_normal(PhiloxKey key, uint64_t index) {
  PhiloxBlock b = philox_at(key, index);
  double u1 = u32_to_unit(b[0]), u2 = u32_to_unit(b[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// out[i] = mean + std * N(0,1) for global elements [begin, begin + count).
template <typename T>
void philox_fill_normal(T* out, uint64_t begin, int64_t count, PhiloxKey key, double mean, double std) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = T(mean + std * philox_normal(key, begin + uint64_t(i)));
}

}  // namespace trident
