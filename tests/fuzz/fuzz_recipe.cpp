// The recipe loader on arbitrary YAML text.
#include "core/recipe/recipe.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  trident::fuzz::refuses_or_reads([&] { trident::load_recipe_text(text, "fuzz.yaml", {}, 1); });
  return 0;
}
