// ZeRO 3's FP8 parameter gathers (train.fp8.param_gather,
// docs/precision.md#fp8-parameter-gathers): the weights of the linears
// whose GEMMs run in FP8 travel as one byte a value, as torchao's float8
// all-gather under FSDP2 sends them. Each weight (each routed expert's
// matrix on its own) is cast with the scale its GEMM would use: under
// tensorwise scaling the whole weight's amax (this rank's share max-reduced
// over the ranks sharing ZeRO's shards and the tensor group where the
// weight is split over it), under delayed scaling its state's scale. The
// decoded window then holds exactly the values the GEMM's own cast of the
// float32 weight gives, so a run with the gathers is the run without them,
// bit for bit, with a quarter of the weights' bytes on the wire; the GEMM
// takes them as they are (Fp8Linears::precast). Norms, biases, routers,
// embeddings and what keep_high_precision names stay float32.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "model/fp8_linear.hpp"
#include "parallel/gather_cast.hpp"

namespace trident::model {

class Fp8ParamGather final : public parallel::GatherCast {
 public:
  // One weight cast with one scale: [begin, end) of its segment.
  struct Weight {
    int64_t begin = 0, end = 0;
    LinearSite site;
    bool over_tensor = true;  // its amax spans the tensor group (its parts are split over it)
  };
  // weights[s]: the model's segment s's, sorted by begin
  Fp8ParamGather(const Fp8Linears& fp8, std::vector<std::vector<Weight>> weights);

  const std::vector<Range>& ranges(int s) const override { return ranges_[size_t(s)]; }
  void prepare(int s, const float* shard, int64_t lo, int64_t hi, parallel::Communicator* group) override;
  void encode(int s, size_t r, const float* x, int64_t n, uint8_t* q) const override;
  void decode(int s, size_t r, const uint8_t* q, int64_t n, float* y) const override;
  void gathered(int s, const float* window) override;
  void released(int s) override;

 private:
  const Fp8Linears& fp8_;
  std::vector<std::vector<Weight>> weights_;
  std::vector<std::vector<Range>> ranges_;
  std::map<int, std::vector<Fp8Linears::PreCast>> cast_;  // a prepared segment's, until released
  std::map<int, const float*> window_;                    // a gathered segment's
};

}  // namespace trident::model
