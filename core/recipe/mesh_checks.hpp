// The recipe's parallel.* checks on a world of ranks (the mesh's product,
// the expert grid, context parallelism, the meshes a recipe can use),
// called by the loader (recipe.cpp) after the model's: each names the key,
// what it expected and what it found, and a mesh error lists the meshes of
// that world size that pass every check.
#pragma once
#include <cstdint>

#include "core/recipe/recipe.hpp"
#include "core/recipe/yaml_reader.hpp"

namespace trident::recipe_detail {

// The one `auto` mesh size becomes the world size over the others (data
// is auto unless given, and 1 when another axis is auto).
void resolve_auto_mesh(Reader& r, Recipe& rc, int64_t world);
// The mesh against the world size, the model's sizes and the expert grid.
void validate_mesh(Reader& r, const Recipe& rc, int64_t world);
// Context parallelism: the sequence in 2 x context chunks; all_to_all's head split.
void validate_context(Reader& r, const Recipe& rc);
// The train.* checks (recipe.cpp); placed: the mesh is the run's. A mesh
// the loader lists must pass them too.
void validate_train(Reader& r, const Recipe& rc, bool placed);

}  // namespace trident::recipe_detail
