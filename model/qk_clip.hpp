// QK-clip (Kimi K2's MuonClip; optim.muon.qk_clip, docs/optim.md#qk-clip):
// after the optimizer's update, every attention head whose largest logit of
// the step (S_h, the scaled q . k over all micro-batches and ranks) exceeds
// the threshold tau has its query and key weights scaled so that its logits
// shrink by gamma_h = tau / S_h (1 for the others):
//   - standard attention: the key weights (and bias) of KV head g by
//     k_g = sqrt(min of gamma over g's query heads), each query head's by
//     gamma_h / k_g. Multi-head attention (a KV head per query head) is
//     Kimi K2's sqrt(gamma_h) on both; with grouped queries every head's
//     logits still scale by exactly its gamma_h.
//   - multi-head latent attention: q_nope and k_nope (kv_b_proj's key rows)
//     by sqrt(gamma_h), q_rope by gamma_h, the shared rotary key
//     (kv_a_proj_with_mqa) untouched, as Kimi K2's report says.
// The values are never touched.
#pragma once
#include <cstdint>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "model/params.hpp"

namespace trident::model {

class QkClip {
 public:
  // The query and key parameters `reg` holds (this rank's layers and slices).
  QkClip(const ParamRegistry& reg, const ModelConfig& cfg, double threshold);
  // max_logit[g * heads + h]: global layer g's (multi-token prediction's
  // after the layers) head h's largest logit of the step, the same on every
  // rank (-inf: not computed). Scales the elements [begin, end) of the flat
  // buffer that `params` holds (params[0] = element begin). Returns how many
  // heads of the whole model exceed the threshold.
  template <typename T>
  int64_t apply(T* params, int64_t begin, int64_t end, const std::vector<double>& max_logit) const;
  // The factor of each head: min(1, tau / S_h).
  std::vector<double> gammas(const std::vector<double>& max_logit) const;

 private:
  enum class Role { q, k, q_rope, none };
  struct Target {
    const ParamSpec* param;
    int64_t layer;
    int kind;  // what its rows are (qk_clip.cpp)
  };
  Role role(const Target& t, int64_t row, int64_t& head) const;
  ModelConfig cfg_;
  double threshold_;
  std::vector<Target> targets_;
};

}  // namespace trident::model
