// ZeRO 3's FP8 parameter gathers (see model/fp8_gather.hpp).
#include "model/fp8_gather.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "kernels/fp8.hpp"

namespace trident::model {

namespace f8 = trident::kernels::fp8;

Fp8ParamGather::Fp8ParamGather(const Fp8Linears& fp8, std::vector<std::vector<Weight>> weights)
    : fp8_(fp8), weights_(std::move(weights)) {
  for (const auto& seg : weights_) {
    ranges_.emplace_back();
    for (const Weight& w : seg) {
      TRIDENT_CHECK(ranges_.back().empty() || ranges_.back().back().end <= w.begin,
                    "FP8 gather: weights out of order at {}", w.begin);
      ranges_.back().push_back({w.begin, w.end});
    }
  }
}

void Fp8ParamGather::prepare(int s, const float* shard, int64_t lo, int64_t hi, parallel::Communicator* group) {
  const std::vector<Weight>& ws = weights_[size_t(s)];
  std::vector<LinearSite> sites;
  std::vector<float> amaxes;
  std::vector<bool> over;
  for (const Weight& w : ws) {  // this rank's share of each weight
    const int64_t a = std::max(lo, w.begin), b = std::min(hi, w.end);
    sites.push_back(w.site);
    amaxes.push_back(b > a ? f8::amax(shard + (a - lo), b - a) : 0.0f);
    over.push_back(w.over_tensor);
  }
  const std::vector<float> scales = fp8_.gather_scales(sites, amaxes, over, group);
  std::vector<Fp8Linears::PreCast>& cast = cast_[s];
  cast.clear();
  for (size_t i = 0; i < ws.size(); ++i) {
    const int64_t a = std::max(lo, ws[i].begin), b = std::min(hi, ws[i].end);
    const int64_t saturated = b > a ? f8::count_saturated(fp8_.weight_format(), shard + (a - lo), b - a, scales[i]) : 0;
    cast.push_back({ws[i].end - ws[i].begin, amaxes[i], scales[i], saturated});
  }
}

void Fp8ParamGather::encode(int s, size_t r, const float* x, int64_t n, uint8_t* q) const {
  f8::quantize(fp8_.weight_format(), x, n, cast_.at(s)[r].scale, q);
}

void Fp8ParamGather::decode(int s, size_t r, const uint8_t* q, int64_t n, float* y) const {
  f8::dequantize(fp8_.weight_format(), q, n, cast_.at(s)[r].scale, y);
}

void Fp8ParamGather::gathered(int s, const float* window) {
  window_[s] = window;
  const std::vector<Weight>& ws = weights_[size_t(s)];
  for (size_t i = 0; i < ws.size(); ++i) fp8_.precast(window + ws[i].begin, cast_.at(s)[i]);
}

void Fp8ParamGather::released(int s) {
  auto it = window_.find(s);
  if (it == window_.end()) return;
  for (const Weight& w : weights_[size_t(s)]) fp8_.forget(it->second + w.begin);
  window_.erase(it);
  cast_.erase(s);
}

}  // namespace trident::model
