// Parameter registry: every parameter's global name (Hugging Face names of
// GPT2LMHeadModel / LlamaForCausalLM), shape, place in the flat buffer,
// initialisation and optimizer treatment. The model's parameters live in one
// flat buffer in registry order, its gradients in a second of the same layout.
//
// Layout choices (documented in docs/architecture.md):
// - Every linear weight is stored [out, in] (torch.nn.Linear). GPT-2's
//   Conv1D weights are [in, out] in Hugging Face files: export transposes.
// - LLaMA's q_proj, k_proj, v_proj are adjacent, so together they are the
//   fused [(H + 2 KV) D, C] QKV weight; gate_proj and up_proj likewise form
//   the [2F, C] gate|up weight. One GEMM each, no copies.
// - Shard slices (for tensor parallelism) are added by the parallel plan.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe.hpp"
#include "core/tensor.hpp"

namespace trident::model {

enum class ParamKind { weight, bias, norm, embedding };
enum class InitKind { normal, zeros, ones };

struct ParamSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in elements, into the flat buffer
  int64_t numel = 0;
  ParamKind kind = ParamKind::weight;
  InitKind init = InitKind::normal;
  double init_std = 0;
};

class ParamRegistry {
 public:
  explicit ParamRegistry(const ModelConfig& cfg);
  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& at(const std::string& name) const;
  int64_t total() const { return total_; }
  // Fills buf (this registry's layout) from Philox keyed by (seed, name).
  template <typename T>
  void initialize(T* buf, uint64_t seed) const { initialize_range(buf, 0, total_, seed); }
  // Elements [begin, end) of the flat buffer into dst (dst[0] = element
  // begin): a ZeRO shard generates exactly the single-rank model's values.
  template <typename T>
  void initialize_range(T* dst, int64_t begin, int64_t end, uint64_t seed) const;

 private:
  void add(std::string name, Shape shape, ParamKind kind, InitKind init, double std = 0);
  std::vector<ParamSpec> params_;
  int64_t total_ = 0;
};

// Per-layer names, so model code reads like the architecture.
std::string layer_prefix(const ModelConfig& cfg, int64_t layer);

}  // namespace trident::model
