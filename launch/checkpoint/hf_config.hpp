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

}  // namespace trident::launch
