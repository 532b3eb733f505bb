// A step's micro-batch from the sampler (see batch.hpp).
#include "core/data/batch.hpp"

#include <algorithm>

namespace trident::data {

Batch read_batch(const TokenSampler& sampler, const BatchSpec& spec, uint64_t first_index, bool valid,
                 int valid_source) {
  const int64_t B = spec.micro_batch, T = spec.seq_len;
  Batch batch;
  batch.B = B, batch.T = T;
  if (!spec.read) return batch;
  batch.tokens.resize(size_t(B * T)), batch.targets.resize(size_t(B * T));
  std::vector<int32_t> sample(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    if (valid && valid_source >= 0)
      sampler.sample_valid_source(valid_source, first_index + uint64_t(b), T + 1, sample.data());
    else
      sampler.sample(first_index + uint64_t(b), valid, T + 1, sample.data());
    std::copy(sample.begin(), sample.begin() + T, batch.tokens.begin() + b * T);
    std::copy(sample.begin() + 1, sample.end(), batch.targets.begin() + b * T);
  }
  if (spec.mask_eod_loss)  // ignored by the loss kernels
    for (auto& t : batch.targets)
      if (t == spec.eod) t = -1;
  if (spec.document_mask) {  // a document starts at 0 and after each EOD token of the input
    batch.doc_start.resize(size_t(B * T));
    for (int64_t b = 0; b < B; ++b) {
      int32_t start = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0 && batch.tokens[size_t(b * T + t - 1)] == spec.eod) start = int32_t(t);
        batch.doc_start[size_t(b * T + t)] = start;
      }
    }
  }
  return batch;
}

}  // namespace trident::data
