// The recipe's model checks (model.*: sizes, attention, MoE, multi-token
// prediction), called by the loader (recipe.cpp) before the mesh's: each
// names the key, what it expected and what it found.
#pragma once
#include "core/recipe/recipe.hpp"
#include "core/recipe/yaml_reader.hpp"

namespace trident::recipe_detail {

// Every model.* cross-field check; sets what follows from the keys (the MoE
// layer's derived fields).
void validate_model_keys(Reader& r, Recipe& rc);

}  // namespace trident::recipe_detail
