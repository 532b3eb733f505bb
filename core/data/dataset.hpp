// Token datasets: Megatron-LM indexed datasets (MMIDIDX .bin/.idx) and the
// seeded synthetic Markov source, behind one sampler interface.
//
// Indexed dataset (.idx, little-endian):
//   magic "MMIDIDX\0\0" (9 bytes) | version u64 = 1 | dtype code u8 |
//   sequence count u64 (S) | document count u64 (D) |
//   sizes i32[S] (tokens per sequence) | pointers i64[S] (byte offset in .bin) |
//   document index i64[D] (first sequence of each document, then S)
// dtype codes: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16; tokens
// must be u8, u16, i32 or i64. The .bin holds the sequences back to back.
//
// Sampling: a training sample is seq_len + 1 consecutive tokens. Sample k of
// the run (k = step * global_batch + position in the batch) is a pure function
// of (seed, k), whatever the mesh, so a run can be resumed exactly and data
// parallel ranks just take their slice of k.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident::data {

enum class TokenDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

int token_dtype_bytes(TokenDType t);

class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin (memory-mapped) and validates them.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  int64_t num_sequences() const { return int64_t(sizes_.size()); }
  int64_t num_documents() const { return int64_t(doc_index_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  TokenDType dtype() const { return dtype_; }
  const std::vector<int32_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& doc_index() const { return doc_index_; }
  // Token at position i of the concatenation of all sequences.
  int64_t token(int64_t i) const;
  // tokens [begin, begin + n) of the concatenated stream into out.
  void read(int64_t begin, int64_t n, int32_t* out) const;
  int64_t max_token() const;
  const std::string& prefix() const { return prefix_; }
  // Token offset of document d in the concatenated stream (d in [0, D]).
  int64_t doc_offset(int64_t d) const { return doc_offsets_[size_t(d)]; }
  int64_t doc_tokens(int64_t d) const { return doc_offsets_[size_t(d + 1)] - doc_offsets_[size_t(d)]; }
  uint32_t index_crc32c() const { return idx_crc_; }  // of the .idx file: the cache key of sample indexes

 private:
  std::string prefix_;
  std::vector<int64_t> doc_offsets_;
  uint32_t idx_crc_ = 0;
  TokenDType dtype_ = TokenDType::u16;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> doc_index_;
  int64_t num_tokens_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_bytes_ = 0;
};

// Writes PREFIX.bin/.idx atomically: to temporary names, fsynced, then
// renamed. Memory stays bounded whatever the size: sequence sizes and the
// document index go to temporary files until finish() assembles the .idx.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes temporaries if finish() was not reached
  void add_sequence(const int32_t* tokens, int64_t n);
  void end_document();
  void finish();
  int64_t num_tokens() const { return byte_offset_ / token_dtype_bytes(dtype_); }
  int64_t num_documents() const { return docs_ - 1; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  FILE *bin_ = nullptr, *sizes_ = nullptr, *doc_index_ = nullptr;
  int64_t byte_offset_ = 0, seqs_ = 0, docs_ = 1, last_doc_end_ = 0;
  std::vector<uint8_t> buf_;
  bool finished_ = false;
};

// Order-k Markov source over `vocab` tokens: each context of k tokens has
// `branching` distinct successors (chosen by Philox from the context) with the
// fixed probabilities p_j proportional to exp(-skew * j). Every context has the
// same next-token entropy H(p), so the entropy rate is exactly H(p) nats.
class MarkovSource {
 public:
  MarkovSource(int64_t vocab, int64_t order, int64_t branching, double skew, uint64_t seed);
  double entropy_rate() const { return entropy_; }
  // Best achievable mean loss over a sequence of n predictions: the first
  // `order - 1` predictions see too short a context (first tokens are uniform).
  double sequence_floor(int64_t n) const;
  // Fills n tokens of sample `index` (stream 0 = train, 1 = valid).
  void sample(uint64_t index, uint32_t stream, int64_t n, int32_t* out) const;
  const std::vector<double>& probs() const { return probs_; }
  // The j-th successor of the context ending at ctx[order-1].
  int32_t successor(const int32_t* ctx, int64_t j) const;

 private:
  int64_t vocab_, order_, branching_;
  uint64_t seed_;
  std::vector<double> probs_, cdf_;
  double entropy_ = 0;
};

// Where training and validation samples come from.
class TokenSampler {
 public:
  virtual ~TokenSampler() = default;
  // Writes n tokens of sample `index` into out; valid = the validation split.
  virtual void sample(uint64_t index, bool valid, int64_t n, int32_t* out) const = 0;
  virtual int64_t vocab_needed() const = 0;  // 1 + the largest token id
  virtual bool has_valid() const { return true; }
  // Blends: the datasets of each split; how many of training samples
  // [0, samples) came from each; validation sample `index` of one dataset.
  virtual std::vector<std::string> train_sources() const { return {}; }
  virtual std::vector<std::string> valid_sources() const { return {}; }
  virtual std::vector<int64_t> train_samples_per_source(uint64_t samples) const { return {}; }
  virtual void sample_valid_source(int source, uint64_t index, int64_t n, int32_t* out) const {
    (void)source;
    sample(index, true, n, out);
  }
};

std::unique_ptr<TokenSampler> make_markov_sampler(int64_t vocab, int64_t order, int64_t branching, double skew,
                                                  uint64_t seed);

// Indexed datasets (one, or a weighted blend per split) through epoch-exact
// sample indexes (core/data/sample_index.hpp). Sample k of a blend comes from the
// dataset whose realised share of samples [0, k) is furthest below its
// weight (ties: the first), so the shares match the weights at every prefix.
struct DatasetSpec {
  std::vector<std::pair<std::string, double>> train, valid;  // prefix, weight
  int64_t sample_len = 0;                                    // seq_len + 1
  uint64_t seed = 0;
  int64_t train_samples = 0, valid_samples = 0;  // how many the run reads
  std::vector<int64_t> max_token;                // per train then valid dataset, if known (else scanned)
};
struct IndexBuild;
std::unique_ptr<TokenSampler> make_dataset_sampler(const DatasetSpec& spec, const IndexBuild& build);

// The blend order: which source each of samples [0, n) comes from.
std::vector<uint8_t> blend_order(const std::vector<double>& weights, int64_t n);

}  // namespace trident::data
