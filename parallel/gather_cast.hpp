// GatherCast: parts of a segment cast to a narrower format for ZeRO 3's
// parameter all-gathers (train.fp8.param_gather: the linears' weights as
// FP8 codes, docs/precision.md#fp8-parameter-gathers). ZeroStorage
// (parallel/zero_storage.hpp) asks it, for each segment it gathers:
//
//   prepare(s, shard, lo, hi, group)  this rank's values [lo, hi) of segment
//                                     s: whatever the casts need (scales),
//                                     collective over `group` (the ranks
//                                     gathering) and whatever else the cast
//                                     reduces over, in the same order on
//                                     every rank
//   encode(s, r, x, n, q)             n values of range r to one byte each
//   decode(s, r, q, n, y)             and back, into the window (float32)
//   gathered(s, window) / released(s) the window holds segment s's values
//
// On the wire each rank's share is its values in order: a byte for each
// value inside a cast range, four for every other (norms, biases, what the
// recipe keeps in high precision). Encode and decode run on the storage's
// device.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/communicator.hpp"

namespace trident::parallel {

class GatherCast {
 public:
  struct Range {
    int64_t begin = 0, end = 0;  // segment-relative; a segment's ranges sorted and disjoint
  };
  virtual ~GatherCast() = default;
  // segment s's cast ranges (empty: gathered as float32)
  virtual const std::vector<Range>& ranges(int s) const = 0;
  // shard[0] is segment s's value lo
  virtual void prepare(int s, const float* shard, int64_t lo, int64_t hi, Communicator* group) = 0;
  virtual void encode(int s, size_t r, const float* x, int64_t n, uint8_t* q) const = 0;
  virtual void decode(int s, size_t r, const uint8_t* q, int64_t n, float* y) const = 0;
  virtual void gathered(int s, const float* window) = 0;
  virtual void released(int s) = 0;
};

}  // namespace trident::parallel
