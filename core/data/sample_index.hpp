// The epoch-exact sample index of one indexed dataset (docs/data.md):
// per epoch e, a shuffled document order (seeded by seed and e) makes a
// token stream; sample j of the epoch is the window of stride + 1 tokens
// starting at j x stride of that stream (stride = seq_len: consecutive
// samples share one token, as in Megatron-LM), and the epoch's samples are
// visited in a shuffled order. Every token of the dataset is a target once
// per epoch, bar the last < stride tokens. Sample k of the run is sample
// k mod S of epoch k / S (S samples per epoch): a pure function of (seed, k).
//
// The index is built once and cached in a file keyed by the dataset, the
// seed, seq_len and the number of epochs (the first epochs of a longer run's
// index are the same), then memory-mapped. The file records the CRC-32C of
// the dataset's .idx; a cache that does not match its data is rebuilt.
//
// Cache file (little-endian): magic "TRDSIDX\0" | u32 version 1 | u32 idx crc |
// u64 seed | i64 stride | i64 epochs | i64 documents | i64 samples per epoch
// | i64 tokens | then per epoch: doc_order i32[D]; all epochs: starts
// i32[E][S+1][2] (position in the doc order, token offset in that document);
// all epochs: order i32[E][S] (the shuffled sample order).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trident::data {

class IndexedDataset;

// Who writes a cache: `builder` ranks write it; the others call wait()
// (which returns once the builders are done) and then read it.
struct IndexBuild {
  bool builder = true;
  std::function<void()> wait;
  std::string cache_dir;  // "" = next to the dataset
};

class SampleIndex {
 public:
  // Loads or builds the index of `data` for at least `samples` samples.
  // InputError when the dataset has fewer than stride + 1 tokens.
  SampleIndex(const IndexedDataset& data, uint64_t seed, int64_t stride, int64_t samples, const IndexBuild& build);
  ~SampleIndex();
  SampleIndex(const SampleIndex&) = delete;
  SampleIndex& operator=(const SampleIndex&) = delete;

  int64_t samples_per_epoch() const { return S_; }
  int64_t epochs() const { return E_; }
  const std::string& path() const { return path_; }
  bool loaded_from_cache() const { return loaded_; }
  double build_seconds() const { return build_s_; }
  // The stride + 1 tokens of sample k (k < epochs x samples per epoch).
  void sample(uint64_t k, int32_t* out) const;
  // Where sample k starts: epoch, position in that epoch's doc order, offset.
  struct Start {
    int64_t epoch, position, offset;
  };
  Start start_of(uint64_t k) const;
  const int32_t* doc_order(int64_t epoch) const { return doc_order_ + epoch * D_; }

 private:
  bool map_if_valid(const std::string& path, uint32_t crc, std::string& why);
  void build(uint32_t crc);

  const IndexedDataset& data_;
  uint64_t seed_;
  int64_t stride_, E_ = 0, S_ = 0, D_ = 0;
  std::string path_;
  bool loaded_ = false;
  double build_s_ = 0;
  std::vector<uint8_t> owned_;  // built in memory when the cache cannot be written
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  const int32_t *doc_order_ = nullptr, *starts_ = nullptr, *order_ = nullptr;
};

}  // namespace trident::data
