// SegmentStorage: where a model finds the values and gradients of one
// segment of its flat parameter buffer while it computes. A segment is a
// contiguous range of the flat buffer that one part of the model owns (the
// embeddings, one transformer layer, the final norm and head).
//
// The model calls, in its compute order: acquire_params(s, next) before it
// reads segment s (next: the segment it will read after s, or -1, so an
// implementation can fetch ahead), release_params(s) after its last read;
// acquire_grads(s) before it writes s's gradients, grads_done(s) after its
// last write. Pointers point at the segment's first element and stay valid
// until the matching release/done. Used by ZeRO stages 2 and 3, which keep
// only a shard of gradients (and parameters) and gather/reduce segments on
// demand; without a SegmentStorage the model uses its own full buffers.
#pragma once
#include <cstdint>

namespace trident {

struct Segment {
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

template <typename T>
class SegmentStorage {
 public:
  virtual ~SegmentStorage() = default;
  virtual T* acquire_params(int s, int next) = 0;
  virtual void release_params(int s) = 0;
  virtual T* acquire_grads(int s) = 0;
  virtual void grads_done(int s) = 0;
};

}  // namespace trident
