// Indexed datasets (read via mmap, written atomically), the Markov source and
// the two samplers. Format described in dataset.hpp and docs/data.md.
#include "core/data/dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/crc32c.hpp"
#include "core/data/sample_index.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"

namespace trident::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

// A whole file, read-only and memory-mapped (no copy, no zero fill).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail_input("{}: cannot open ({})", path, std::strerror(errno));
    struct stat st {};
    fstat(fd, &st);
    size_ = size_t(st.st_size);
    if (size_ > 0) {
      void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        fail_input("{}: cannot map ({})", path, std::strerror(errno));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct Cursor {
  const std::string& path;
  const MappedFile& data;
  size_t pos = 0;
  template <typename T>
  T get(const char* what) {
    if (pos + sizeof(T) > data.size())
      fail_input("{}: truncated index at offset {}: expected {} ({} bytes), file has {} bytes", path, pos, what,
                 sizeof(T), data.size());
    T v;
    std::memcpy(&v, data.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  template <typename T>
  void get_array(std::vector<T>& out, uint64_t n, const char* what) {
    if (n > (data.size() - pos) / sizeof(T))
      fail_input("{}: truncated index at offset {}: expected {} {} entries ({} bytes), {} bytes remain", path, pos, n,
                 what, n * sizeof(T), data.size() - pos);
    out.resize(n);
    if (n) std::memcpy(out.data(), data.data() + pos, n * sizeof(T));
    pos += n * sizeof(T);
  }
};

void write_all(FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) throw Error(fmt::format("{}: write failed ({})", path, std::strerror(errno)));
}

void sync_close(FILE*& f, const std::string& path) {
  if (std::fflush(f) != 0 || fsync(fileno(f)) != 0)
    throw Error(fmt::format("{}: flush failed ({})", path, std::strerror(errno)));
  std::fclose(f);
  f = nullptr;
}

}  // namespace

int token_dtype_bytes(TokenDType t) {
  switch (t) {
    case TokenDType::u8:
    case TokenDType::i8:
      return 1;
    case TokenDType::i16:
    case TokenDType::u16:
      return 2;
    case TokenDType::i32:
    case TokenDType::f32:
      return 4;
    case TokenDType::i64:
    case TokenDType::f64:
      return 8;
  }
  return 0;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const MappedFile idx(idx_path);
  Cursor c{idx_path, idx};
  if (idx.size() < 9 || std::memcmp(idx.data(), kMagic, 9) != 0)
    fail_input("{}: bad magic at offset 0: expected \"MMIDIDX\\0\\0\", found {} bytes not matching", idx_path,
               std::min<size_t>(idx.size(), 9));
  c.pos = 9;
  uint64_t version = c.get<uint64_t>("version");
  if (version != 1) fail_input("{}: offset 9: expected version 1, found {}", idx_path, version);
  uint8_t code = c.get<uint8_t>("dtype code");
  if (code != 1 && code != 4 && code != 5 && code != 8)
    fail_input("{}: offset 17: expected token dtype code 1 (u8), 4 (i32), 5 (i64) or 8 (u16), found {}", idx_path,
               int(code));
  dtype_ = TokenDType(code);
  uint64_t seqs = c.get<uint64_t>("sequence count");
  uint64_t docs = c.get<uint64_t>("document count");
  c.get_array(sizes_, seqs, "size");
  const size_t pointers_at = c.pos;  // checked against the sizes below, not kept
  if (seqs > (idx.size() - c.pos) / 8)
    fail_input("{}: truncated index at offset {}: expected {} pointer entries ({} bytes), {} bytes remain", idx_path,
               c.pos, seqs, seqs * 8, idx.size() - c.pos);
  c.pos += seqs * 8;
  c.get_array(doc_index_, docs, "document index");
  if (c.pos != idx.size())
    fail_input("{}: {} unexpected trailing bytes after offset {}", idx_path, idx.size() - c.pos, c.pos);
  if (doc_index_.empty() || doc_index_.front() != 0 || doc_index_.back() != int64_t(seqs))
    fail_input("{}: document index must start at 0 and end at the sequence count {}", idx_path, seqs);
  for (size_t i = 1; i < doc_index_.size(); ++i)
    if (doc_index_[i] < doc_index_[i - 1])
      fail_input("{}: document index entry {} ({}) is smaller than the previous ({})", idx_path, i, doc_index_[i],
                 doc_index_[i - 1]);

  int fd = ::open(bin_path.c_str(), O_RDONLY);
  if (fd < 0) fail_input("{}: cannot open ({})", bin_path, std::strerror(errno));
  struct stat st {};
  fstat(fd, &st);
  bin_bytes_ = size_t(st.st_size);
  int64_t width = token_dtype_bytes(dtype_);
  int64_t expect = 0;
  for (size_t i = 0; i < seqs; ++i) {
    if (sizes_[i] < 0) fail_input("{}: sequence {} has negative size {}", idx_path, i, sizes_[i]);
    int64_t pointer;
    std::memcpy(&pointer, idx.data() + pointers_at + 8 * i, 8);
    if (pointer != expect)
      fail_input("{}: sequence {} pointer: expected byte offset {}, found {}", idx_path, i, expect, pointer);
    expect += int64_t(sizes_[i]) * width;
  }
  if (int64_t(bin_bytes_) != expect) {
    ::close(fd);
    fail_input("{}: expected {} bytes ({} tokens of {} bytes, per {}), found {} bytes", bin_path, expect,
               expect / width, width, idx_path, bin_bytes_);
  }
  num_tokens_ = expect / width;
  idx_crc_ = crc32c(idx.data(), idx.size());
  doc_offsets_.resize(doc_index_.size());
  {
    int64_t tokens = 0;
    size_t seq = 0;
    for (size_t d = 0; d < doc_index_.size(); ++d) {
      for (; int64_t(seq) < doc_index_[d]; ++seq) tokens += sizes_[seq];
      doc_offsets_[d] = tokens;
    }
  }
  if (bin_bytes_ > 0) {
    void* p = mmap(nullptr, bin_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(fmt::format("{}: mmap failed ({})", bin_path, std::strerror(errno)));
    }
    bin_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

IndexedDataset::~IndexedDataset() {
  if (bin_) munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

int64_t IndexedDataset::token(int64_t i) const {
  switch (dtype_) {
    case TokenDType::u8:
      return bin_[i];
    case TokenDType::u16: {
      uint16_t v;
      std::memcpy(&v, bin_ + 2 * i, 2);
      return v;
    }
    case TokenDType::i32: {
      int32_t v;
      std::memcpy(&v, bin_ + 4 * i, 4);
      return v;
    }
    case TokenDType::i64: {
      int64_t v;
      std::memcpy(&v, bin_ + 8 * i, 8);
      return v;
    }
    default:
      return 0;
  }
}

void IndexedDataset::read(int64_t begin, int64_t n, int32_t* out) const {
  TRIDENT_CHECK(begin >= 0 && begin + n <= num_tokens_, "read [{}, {}) outside {} tokens", begin, begin + n,
                num_tokens_);
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(token(begin + i));
}

int64_t IndexedDataset::max_token() const {
  int64_t m = 0;
  for (int64_t i = 0; i < num_tokens_; ++i) m = std::max(m, token(i));
  return m;
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  for (auto [f, ext] : {std::pair{&bin_, ".bin.tmp"}, {&sizes_, ".idx.sizes.tmp"}, {&doc_index_, ".idx.docs.tmp"}}) {
    *f = std::fopen((prefix_ + ext).c_str(), "w+b");
    if (!*f) fail_input("{}{}: cannot create ({})", prefix_, ext, std::strerror(errno));
  }
  const int64_t zero = 0;
  write_all(doc_index_, &zero, 8, prefix_ + ".idx.docs.tmp");
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  for (FILE* f : {bin_, sizes_, doc_index_})
    if (f) std::fclose(f);
  std::remove((prefix_ + ".idx.sizes.tmp").c_str());
  std::remove((prefix_ + ".idx.docs.tmp").c_str());
  if (finished_) return;
  std::remove((prefix_ + ".bin.tmp").c_str());
  std::remove((prefix_ + ".idx.tmp").c_str());
}

void IndexedDatasetWriter::add_sequence(const int32_t* tokens, int64_t n) {
  const int w = token_dtype_bytes(dtype_);
  if (n > INT32_MAX) throw Error(fmt::format("{}: a sequence of {} tokens exceeds the format's i32 size", prefix_, n));
  buf_.resize(size_t(n) * size_t(w));
  if (w == 2) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t v = uint16_t(tokens[i]);
      std::memcpy(buf_.data() + 2 * i, &v, 2);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = tokens[i];
      std::memcpy(buf_.data() + i * w, &v, size_t(w));  // little-endian truncation to the token width
    }
  }
  write_all(bin_, buf_.data(), buf_.size(), prefix_ + ".bin.tmp");
  const int32_t size = int32_t(n);
  write_all(sizes_, &size, 4, prefix_ + ".idx.sizes.tmp");
  ++seqs_;
  byte_offset_ += int64_t(buf_.size());
}

void IndexedDatasetWriter::end_document() {
  write_all(doc_index_, &seqs_, 8, prefix_ + ".idx.docs.tmp");
  last_doc_end_ = seqs_;
  ++docs_;
}

void IndexedDatasetWriter::finish() {
  if (last_doc_end_ != seqs_) end_document();
  std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  sync_close(bin_, bin_tmp);
  FILE* idx = std::fopen(idx_tmp.c_str(), "wb");
  if (!idx) throw Error(fmt::format("{}: cannot create ({})", idx_tmp, std::strerror(errno)));
  uint64_t version = 1, seqs = uint64_t(seqs_), docs = uint64_t(docs_);
  uint8_t code = uint8_t(dtype_);
  write_all(idx, kMagic, 9, idx_tmp);
  write_all(idx, &version, 8, idx_tmp);
  write_all(idx, &code, 1, idx_tmp);
  write_all(idx, &seqs, 8, idx_tmp);
  write_all(idx, &docs, 8, idx_tmp);
  // sizes, then the pointers they imply, then the document index: copied in chunks
  std::vector<int32_t> sizes(1 << 16);
  std::vector<int64_t> pointers(1 << 16);
  for (int pass = 0; pass < 2; ++pass) {
    std::rewind(sizes_);
    int64_t offset = 0;
    size_t n;
    while ((n = std::fread(sizes.data(), 4, sizes.size(), sizes_)) > 0) {
      if (pass == 0) {
        write_all(idx, sizes.data(), n * 4, idx_tmp);
        continue;
      }
      for (size_t i = 0; i < n; ++i) pointers[i] = offset, offset += int64_t(sizes[i]) * token_dtype_bytes(dtype_);
      write_all(idx, pointers.data(), n * 8, idx_tmp);
    }
  }
  std::rewind(doc_index_);
  size_t n;
  while ((n = std::fread(pointers.data(), 8, pointers.size(), doc_index_)) > 0)
    write_all(idx, pointers.data(), n * 8, idx_tmp);
  sync_close(idx, idx_tmp);
  if (std::rename(bin_tmp.c_str(), (prefix_ + ".bin").c_str()) != 0 ||
      std::rename(idx_tmp.c_str(), (prefix_ + ".idx").c_str()) != 0)
    throw Error(fmt::format("{}: rename failed ({})", prefix_, std::strerror(errno)));
  finished_ = true;
}

MarkovSource::MarkovSource(int64_t vocab, int64_t order, int64_t branching, double skew, uint64_t seed)
    : vocab_(vocab), order_(order), branching_(branching), seed_(seed) {
  double z = 0;
  for (int64_t j = 0; j < branching; ++j) z += std::exp(-skew * double(j));
  double c = 0;
  for (int64_t j = 0; j < branching; ++j) {
    double p = std::exp(-skew * double(j)) / z;
    probs_.push_back(p);
    c += p;
    cdf_.push_back(c);
    entropy_ -= p * std::log(p);
  }
  cdf_.back() = 1.0;
}

double MarkovSource::sequence_floor(int64_t n) const {
  int64_t blind = std::min<int64_t>(order_ - 1, n);
  return (double(blind) * std::log(double(vocab_)) + double(n - blind) * entropy_) / double(n);
}

int32_t MarkovSource::successor(const int32_t* ctx, int64_t j) const {
  uint64_t h = seed_ * 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < order_; ++i) h = (h ^ uint64_t(ctx[i])) * 0x100000001b3ull + 0x632BE59BD9B4E019ull;
  PhiloxKey key{uint32_t(h), uint32_t(h >> 32)};
  int32_t chosen[1024];
  int64_t n = 0;
  for (uint64_t counter = 0; n <= j; ++counter) {
    PhiloxBlock b = philox_at(key, counter, 7);
    for (uint32_t r : b) {
      int32_t tok = int32_t(r % uint32_t(vocab_));
      if (std::find(chosen, chosen + n, tok) == chosen + n) chosen[n++] = tok;
      if (n > j) break;
    }
  }
  return chosen[j];
}

void MarkovSource::sample(uint64_t index, uint32_t stream, int64_t n, int32_t* out) const {
  PhiloxKey key = philox_key(seed_, stream == 0 ? "markov.train" : "markov.valid");
  for (int64_t t = 0; t < n; ++t) {
    PhiloxBlock b = philox_at(key, index, uint32_t(t));
    if (t < order_) {
      out[t] = int32_t(b[0] % uint32_t(vocab_));
      continue;
    }
    double u = u32_to_unit(b[0]);
    int64_t j = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    out[t] = successor(out + t - order_, std::min<int64_t>(j, branching_ - 1));
  }
}

namespace {

class MarkovSampler : public TokenSampler {
 public:
  explicit MarkovSampler(MarkovSource src) : src_(std::move(src)), vocab_(0) {}
  void sample(uint64_t index, bool valid, int64_t n, int32_t* out) const override {
    src_.sample(index, valid ? 1 : 0, n, out);
  }
  int64_t vocab_needed() const override { return vocab_; }
  MarkovSource src_;
  int64_t vocab_;
};

// The samples of one split: one dataset or a blend.
class Split {
 public:
  // each_alone: every dataset can also be read alone for `samples` samples
  // (validation blends are evaluated per dataset too).
  Split(const std::vector<std::pair<std::string, double>>& sources, const DatasetSpec& spec, int64_t samples,
        const IndexBuild& build, const int64_t* max_token, bool each_alone)
      : samples_(samples) {
    double total = 0;
    for (const auto& [path, w] : sources) total += w;
    for (const auto& [path, w] : sources) weights_.push_back(w / total);
    order_ = blend_order(weights_, samples);
    const std::vector<int64_t> per = counts(uint64_t(samples));
    for (size_t i = 0; i < sources.size(); ++i) {
      names_.push_back(sources[i].first);
      data_.push_back(std::make_unique<IndexedDataset>(sources[i].first));
      index_.push_back(std::make_unique<SampleIndex>(*data_.back(), spec.seed, spec.sample_len - 1,
                                                     std::max<int64_t>({1, per[i], each_alone ? samples : 0}), build));
      vocab_ = std::max(vocab_, max_token && max_token[i] >= 0 ? max_token[i] + 1 : data_.back()->max_token() + 1);
    }
    // counts at the start of each block of 256 samples
    const size_t blocks = size_t(samples / 256 + 1);
    block_counts_.assign(blocks * sources.size(), 0);
    std::vector<int64_t> c(sources.size(), 0);
    for (int64_t k = 0; k < samples; ++k) {
      if (k % 256 == 0) std::copy(c.begin(), c.end(), block_counts_.begin() + (k / 256) * int64_t(c.size()));
      ++c[order_[size_t(k)]];
    }
  }
  // Source and the sample index within it, of sample k.
  std::pair<int, uint64_t> locate(uint64_t k) const {
    if (data_.size() == 1) return {0, k};
    TRIDENT_CHECK(int64_t(k) < samples_, "blend sample {} beyond the {} the run was set up for", k, samples_);
    const int src = order_[k];
    const uint64_t block = k / 256;
    uint64_t n = uint64_t(block_counts_[block * data_.size() + size_t(src)]);
    for (uint64_t i = block * 256; i < k; ++i) n += order_[i] == src;
    return {src, n};
  }
  void sample(uint64_t k, int32_t* out) const {
    const auto [src, j] = locate(k);
    index_[size_t(src)]->sample(j, out);
  }
  void sample_source(int src, uint64_t j, int32_t* out) const { index_[size_t(src)]->sample(j, out); }
  std::vector<int64_t> counts(uint64_t n) const {
    if (weights_.size() == 1) return {int64_t(n)};
    n = std::min<uint64_t>(n, order_.size());
    const size_t K = weights_.size();
    std::vector<int64_t> c(K, 0);
    if (!block_counts_.empty() && n > 0) {
      const uint64_t block = std::min<uint64_t>(n / 256, block_counts_.size() / K - 1);
      std::copy(block_counts_.begin() + int64_t(block * K), block_counts_.begin() + int64_t((block + 1) * K),
                c.begin());
      for (uint64_t k = block * 256; k < n; ++k) ++c[order_[k]];
      return c;
    }
    for (uint64_t k = 0; k < n; ++k) ++c[order_[k]];
    return c;
  }
  const std::vector<std::string>& names() const { return names_; }
  int64_t vocab_needed() const { return vocab_; }

 private:
  int64_t samples_;
  std::vector<double> weights_;
  std::vector<uint8_t> order_;
  std::vector<int64_t> block_counts_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<IndexedDataset>> data_;
  std::vector<std::unique_ptr<SampleIndex>> index_;
  int64_t vocab_ = 0;
};

class DatasetSampler : public TokenSampler {
 public:
  DatasetSampler(const DatasetSpec& spec, const IndexBuild& build) : len_(spec.sample_len) {
    const int64_t* max_token = spec.max_token.empty() ? nullptr : spec.max_token.data();
    train_ = std::make_unique<Split>(spec.train, spec, spec.train_samples, build, max_token, false);
    if (!spec.valid.empty())
      valid_ = std::make_unique<Split>(spec.valid, spec, spec.valid_samples, build,
                                       max_token ? max_token + spec.train.size() : nullptr, true);
    vocab_ = std::max(train_->vocab_needed(), valid_ ? valid_->vocab_needed() : 0);
  }
  void sample(uint64_t index, bool valid, int64_t n, int32_t* out) const override {
    TRIDENT_CHECK(n == len_, "sample of {} tokens from an index built for {}", n, len_);
    (valid ? *valid_ : *train_).sample(index, out);
  }
  void sample_valid_source(int source, uint64_t index, int64_t n, int32_t* out) const override {
    TRIDENT_CHECK(n == len_, "sample of {} tokens from an index built for {}", n, len_);
    valid_->sample_source(source, index, out);
  }
  int64_t vocab_needed() const override { return vocab_; }
  bool has_valid() const override { return valid_ != nullptr; }
  std::vector<std::string> train_sources() const override { return train_->names(); }
  std::vector<std::string> valid_sources() const override {
    return valid_ ? valid_->names() : std::vector<std::string>{};
  }
  std::vector<int64_t> train_samples_per_source(uint64_t samples) const override { return train_->counts(samples); }

 private:
  int64_t len_;
  std::unique_ptr<Split> train_, valid_;
  int64_t vocab_ = 0;
};

}  // namespace

std::unique_ptr<TokenSampler> make_markov_sampler(int64_t vocab, int64_t order, int64_t branching, double skew,
                                                  uint64_t seed) {
  auto s = std::make_unique<MarkovSampler>(MarkovSource(vocab, order, branching, skew, seed));
  s->vocab_ = vocab;
  return s;
}

std::vector<uint8_t> blend_order(const std::vector<double>& weights, int64_t n) {
  TRIDENT_CHECK(weights.size() <= 255, "a blend of {} datasets (at most 255)", weights.size());
  std::vector<uint8_t> order(size_t(std::max<int64_t>(n, 0)), 0);
  if (weights.size() <= 1) return order;
  std::vector<int64_t> c(weights.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    size_t best = 0;
    double best_gap = -1e300;
    for (size_t i = 0; i < weights.size(); ++i) {
      const double gap = weights[i] * double(k + 1) - double(c[i]);
      if (gap > best_gap) best_gap = gap, best = i;
    }
    order[size_t(k)] = uint8_t(best);
    ++c[best];
  }
  return order;
}

std::unique_ptr<TokenSampler> make_dataset_sampler(const DatasetSpec& spec, const IndexBuild& build) {
  return std::make_unique<DatasetSampler>(spec, build);
}

}  // namespace trident::data
