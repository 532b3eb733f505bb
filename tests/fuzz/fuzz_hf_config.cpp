// Import's config.json check against the demo (GPT-2), LLaMA, MoE (Mixtral-like) and DeepSeek-V3 (MLA, MTP)
// recipes.
#include <nlohmann/json.hpp>

#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/hf_config.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const trident::Recipe gpt2 = trident::load_recipe(TRIDENT_SOURCE_DIR "/configs/demo.yaml", {}, 1);
  static const trident::Recipe llama = trident::load_recipe(TRIDENT_SOURCE_DIR "/configs/llama-tiny.yaml", {}, 1);
  static const trident::Recipe moe = trident::load_recipe(TRIDENT_SOURCE_DIR "/configs/moe-tiny.yaml", {}, 1);
  static const trident::Recipe deepseek =
      trident::load_recipe(TRIDENT_SOURCE_DIR "/configs/deepseek-v3-tiny.yaml", {}, 1);
  const nlohmann::json config = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return 0;  // import refuses these before the check
  for (const auto* rc : {&gpt2, &llama, &moe, &deepseek})
    trident::fuzz::refuses_or_reads([&] { trident::launch::check_hf_config("config.json", config, *rc); });
  return 0;
}
