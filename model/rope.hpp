// The rotary frequencies of a model (model.rope_theta, model.rope_scaling)
// as transformers computes them (modeling_rope_utils: the default, linear,
// llama3 and yarn rope types), and the table the rotary kernels read
// (kernels/rotary.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "core/recipe/recipe.hpp"

namespace trident::model {

struct RopeFrequencies {
  std::vector<double> inv_freq;  // [dim / 2]: each pair's angle per position
  double attention_factor = 1;   // cos and sin are scaled by it (yarn)
  // multi-head latent attention's extra factor on its softmax scale
  // (transformers' yarn_apply_mscale: mscale(factor, mscale_all_dim)^2)
  double softmax_factor = 1;
};
// The frequencies of rotary parts of dim values.
RopeFrequencies rope_frequencies(const ModelConfig& m, int64_t dim);
// The (cos, sin) table [seq_len, dim / 2, 2] of rotary parts of dim values.
std::vector<double> rope_table(const ModelConfig& m, int64_t dim);

}  // namespace trident::model
