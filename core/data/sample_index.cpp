// Epoch-exact sample indexes, built once and memory-mapped (see sample_index.hpp).
#include "core/data/sample_index.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/data/dataset.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::data {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'D', 'S', 'I', 'D', 'X', 0};
constexpr size_t kHeader = 8 + 4 + 4 + 8 * 6;

struct Header {
  uint32_t version, crc;
  uint64_t seed;
  int64_t stride, epochs, docs, samples, tokens;

  // The 56 bytes after the magic, field by field (little-endian, no padding).
  void store(char* p) const {
    std::memcpy(p, &version, 4);
    std::memcpy(p + 4, &crc, 4);
    std::memcpy(p + 8, &seed, 8);
    const int64_t rest[5] = {stride, epochs, docs, samples, tokens};
    std::memcpy(p + 16, rest, sizeof rest);
  }
  void load(const char* p) {
    std::memcpy(&version, p, 4);
    std::memcpy(&crc, p + 4, 4);
    std::memcpy(&seed, p + 8, 8);
    int64_t rest[5];
    std::memcpy(rest, p + 16, sizeof rest);
    stride = rest[0], epochs = rest[1], docs = rest[2], samples = rest[3], tokens = rest[4];
  }
};

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Fisher-Yates with a counter-based generator: the same order on every
// machine and library (std::shuffle's algorithm is not specified).
void shuffle(int32_t* a, int64_t n, uint64_t key) {
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t r = splitmix(key + uint64_t(i));
    const int64_t j = int64_t((unsigned __int128)r * uint64_t(i + 1) >> 64);
    std::swap(a[i], a[j]);
  }
}

size_t file_bytes(int64_t E, int64_t D, int64_t S) {
  return kHeader + size_t(E) * (size_t(D) * 4 + size_t(S + 1) * 8 + size_t(S) * 4);
}

}  // namespace

SampleIndex::SampleIndex(const IndexedDataset& data, uint64_t seed, int64_t stride, int64_t samples,
                         const IndexBuild& build)
    : data_(data), seed_(seed), stride_(stride), D_(data.num_documents()) {
  if (data.num_tokens() < stride + 1)
    fail_input("{}: the dataset has {} tokens; a sample needs seq_len + 1 = {}", data.prefix(), data.num_tokens(),
               stride + 1);
  if (D_ >= INT32_MAX) fail_input("{}: {} documents exceed the sample index's 2^31 - 1", data.prefix(), D_);
  S_ = (data.num_tokens() - 1) / stride;
  E_ = std::max<int64_t>(1, (samples + S_ - 1) / S_);
  const std::string name = std::filesystem::path(data.prefix()).filename().string();
  const std::string dir =
      build.cache_dir.empty() ? std::filesystem::path(data.prefix()).parent_path().string() : build.cache_dir;
  path_ = (std::filesystem::path(dir.empty() ? "." : dir) /
           fmt::format("{}.seed{}.len{}.epochs{}.sidx", name, seed, stride, E_))
              .string();
  const uint32_t crc = data.index_crc32c();
  std::string why;
  if (!build.builder) {
    if (build.wait) build.wait();
    if (map_if_valid(path_, crc, why)) return;
    log::warn("{}: {}; building the sample index in memory", path_, why);
    this->build(crc);
    return;
  }
  if (map_if_valid(path_, crc, why)) {
    if (build.wait) build.wait();
    return;
  }
  if (std::filesystem::exists(path_)) log::info("{}: {}; rebuilding it", path_, why);
  this->build(crc);
  // the cache: a temporary name of this process, renamed into place
  char host[256] = "host";
  gethostname(host, sizeof(host) - 1);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path_, host, getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f && std::fwrite(owned_.data(), 1, owned_.size(), f) == owned_.size() && std::fflush(f) == 0 &&
            fsync(fileno(f)) == 0;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (ok) ok = std::rename(tmp.c_str(), path_.c_str()) == 0;
  if (!ok) {
    std::remove(tmp.c_str());
    log::warn("{}: cannot write the sample index cache ({}); set data.cache_dir to a writable directory", path_,
              std::strerror(errno));
  }
  if (build.wait) build.wait();
}

SampleIndex::~SampleIndex() {
  if (map_) munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

bool SampleIndex::map_if_valid(const std::string& path, uint32_t crc, std::string& why) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    why = "no cached sample index";
    return false;
  }
  struct stat st {};
  fstat(fd, &st);
  const size_t expect = file_bytes(E_, D_, S_);
  Header h{};
  char bytes[kHeader] = {};
  const bool read_ok = size_t(st.st_size) >= kHeader && pread(fd, bytes, kHeader, 0) == ssize_t(kHeader);
  h.load(bytes + 8);
  if (!read_ok || std::memcmp(bytes, kMagic, 8) != 0 || h.version != 1)
    why = "the cached sample index is not a Trident sample index (bad header)";
  else if (h.crc != crc)
    why = fmt::format("the cached sample index was built for other data (.idx CRC-32C {:08x}, the data's is {:08x})",
                      h.crc, crc);
  else if (h.seed != seed_ || h.stride != stride_ || h.epochs != E_ || h.docs != D_ || h.samples != S_ ||
           h.tokens != data_.num_tokens())
    why = "the cached sample index does not match its data (seed, seq_len, epochs or sizes differ)";
  else if (size_t(st.st_size) != expect)
    why = fmt::format("the cached sample index has {} bytes, expected {}", st.st_size, expect);
  if (!why.empty()) {
    ::close(fd);
    return false;
  }
  void* p = mmap(nullptr, expect, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    why = fmt::format("mmap failed ({})", std::strerror(errno));
    return false;
  }
  map_ = static_cast<const uint8_t*>(p), map_bytes_ = expect;
  doc_order_ = reinterpret_cast<const int32_t*>(map_ + kHeader);
  starts_ = doc_order_ + E_ * D_;
  order_ = starts_ + E_ * (S_ + 1) * 2;
  loaded_ = true;
  return true;
}

void SampleIndex::build(uint32_t crc) {
  const auto t0 = std::chrono::steady_clock::now();
  owned_.assign(file_bytes(E_, D_, S_), 0);
  uint8_t* p = owned_.data();
  std::memcpy(p, kMagic, 8);
  const Header h{1, crc, seed_, stride_, E_, D_, S_, data_.num_tokens()};
  h.store(reinterpret_cast<char*>(p + 8));
  auto* doc_order = reinterpret_cast<int32_t*>(p + kHeader);
  auto* starts = doc_order + E_ * D_;
  auto* order = starts + E_ * (S_ + 1) * 2;
  for (int64_t e = 0; e < E_; ++e) {
    int32_t* docs = doc_order + e * D_;
    std::iota(docs, docs + D_, 0);
    shuffle(docs, D_, splitmix(seed_ ^ 0x646F63u) + uint64_t(e) * 0x100000001B3ull);
    // sample j starts at token j * stride of this epoch's stream
    int32_t* st = starts + e * (S_ + 1) * 2;
    int64_t position = 0, doc_begin = 0;  // stream offset of docs[position]
    for (int64_t j = 0; j <= S_; ++j) {
      const int64_t t = j * stride_;
      while (position < D_ && doc_begin + data_.doc_tokens(docs[position]) <= t)
        doc_begin += data_.doc_tokens(docs[position++]);
      st[2 * j] = int32_t(position), st[2 * j + 1] = int32_t(t - doc_begin);
    }
    int32_t* ord = order + e * S_;
    std::iota(ord, ord + S_, 0);
    shuffle(ord, S_, splitmix(seed_ ^ 0x736D70u) + uint64_t(e) * 0x100000001B3ull);
  }
  doc_order_ = doc_order, starts_ = starts, order_ = order;
  build_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

SampleIndex::Start SampleIndex::start_of(uint64_t k) const {
  const int64_t e = int64_t(k / uint64_t(S_)), j = int64_t(k % uint64_t(S_));
  TRIDENT_CHECK(e < E_, "sample {} is beyond the {} epoch(s) the index was built for", k, E_);
  const int64_t s = order_[e * S_ + j];
  const int32_t* st = starts_ + e * (S_ + 1) * 2 + 2 * s;
  return {e, st[0], st[1]};
}

void SampleIndex::sample(uint64_t k, int32_t* out) const {
  const Start s = start_of(k);
  const int32_t* docs = doc_order(s.epoch);
  int64_t need = stride_ + 1, position = s.position, offset = s.offset;
  while (need > 0) {
    TRIDENT_CHECK(position < D_, "sample {} runs past the end of epoch {}", k, s.epoch);
    const int64_t d = docs[position];
    const int64_t take = std::min(need, data_.doc_tokens(d) - offset);
    if (take > 0) {
      data_.read(data_.doc_offset(d) + offset, take, out);
      out += take, need -= take;
    }
    ++position, offset = 0;
  }
}

}  // namespace trident::data
