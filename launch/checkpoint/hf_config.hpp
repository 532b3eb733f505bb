// A transformers config.json against the recipe's model (import): the
// architecture and every size must agree; options Trident does not have
// (biases, scaled RoPE, other activations) are refused. InputError naming
// `path` and the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/recipe/recipe.hpp"

namespace trident::launch {

void check_hf_config(const std::string& path, const nlohmann::json& config, const Recipe& rc);
// The recipe text config.json describes: its model section (every key
// check_hf_config compares) and training keys a user edits.
// with_mtp: DeepSeek-V3's multi-token prediction modules (num_nextn_predict_layers), when the checkpoint has them.
std::string recipe_from_hf_config(const std::string& path, const nlohmann::json& config, bool with_mtp = true);

}  // namespace trident::launch
