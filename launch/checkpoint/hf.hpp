// Hugging Face interoperability (docs/checkpoint.md#hugging-face):
//   export: a Trident checkpoint (any mesh) -> DIR/model.safetensors +
//           DIR/config.json, loadable by transformers' GPT2LMHeadModel or
//           LlamaForCausalLM (vocabulary padding stripped, GPT-2's Conv1D
//           weights transposed to [in, out], tied heads left out).
//   import: such a directory (one model.safetensors or a sharded
//           model.safetensors.index.json; F32, BF16, F16 or F64) + a recipe
//           -> a step-0 Trident checkpoint to train from.
// Both write into DIR.tmp and rename it into place: a failure leaves nothing.
#pragma once
#include <string>
#include <vector>

namespace trident::launch {

void export_hf(const std::string& checkpoint, const std::string& out_dir);

// The recipe (with --set overrides) must describe the same model as
// config.json; any mesh in it is ignored (the checkpoint is saved as 1x1x1 and
// resharded on resume).
void import_hf(const std::string& hf_dir, const std::string& recipe, const std::vector<std::string>& sets,
               const std::string& out_dir);

}  // namespace trident::launch
