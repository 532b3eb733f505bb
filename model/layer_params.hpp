// A layer's parameters and gradients as the parts of a layer read them
// (model/attention.hpp, model/mlp.hpp, model/mtp.hpp), and a GEMM input.
#pragma once
#include <array>
#include <cstdint>

#include "kernels/fp8.hpp"
#include "model/architecture.hpp"
#include "model/moe.hpp"

namespace trident::model {

// A layer's parameters and gradients, one pointer per slot (Slot order,
// model/architecture.hpp; null where the architecture has no such slot),
// read through named accessors; an MoE layer's fcw / pw are its shared
// experts' (null without them).
template <typename T>
struct LayerParams {
  std::array<T*, kLayerSlots> param{}, grad{};
  int layer = -1;          // the model's local layer index (where its FP8 GEMMs are, model/fp8_linear.hpp)
  T* max_logit = nullptr;  // QK-clip: [heads] the layer's largest logits, max'ed in by training forwards (or null)
  T* n1w() const { return param[size_t(Slot::norm1_weight)]; }
  T* dn1w() const { return grad[size_t(Slot::norm1_weight)]; }
  T* n1b() const { return param[size_t(Slot::norm1_bias)]; }
  T* dn1b() const { return grad[size_t(Slot::norm1_bias)]; }
  T* qkvw() const { return param[size_t(Slot::qkv_weight)]; }
  T* dqkvw() const { return grad[size_t(Slot::qkv_weight)]; }
  T* qkvb() const { return param[size_t(Slot::qkv_bias)]; }
  T* dqkvb() const { return grad[size_t(Slot::qkv_bias)]; }
  T* ow() const { return param[size_t(Slot::attn_out_weight)]; }
  T* dow() const { return grad[size_t(Slot::attn_out_weight)]; }
  T* ob() const { return param[size_t(Slot::attn_out_bias)]; }
  T* dob() const { return grad[size_t(Slot::attn_out_bias)]; }
  T* n2w() const { return param[size_t(Slot::norm2_weight)]; }
  T* dn2w() const { return grad[size_t(Slot::norm2_weight)]; }
  T* n2b() const { return param[size_t(Slot::norm2_bias)]; }
  T* dn2b() const { return grad[size_t(Slot::norm2_bias)]; }
  T* fcw() const { return param[size_t(Slot::mlp_in_weight)]; }
  T* dfcw() const { return grad[size_t(Slot::mlp_in_weight)]; }
  T* fcb() const { return param[size_t(Slot::mlp_in_bias)]; }
  T* dfcb() const { return grad[size_t(Slot::mlp_in_bias)]; }
  T* pw() const { return param[size_t(Slot::mlp_out_weight)]; }
  T* dpw() const { return grad[size_t(Slot::mlp_out_weight)]; }
  T* pb() const { return param[size_t(Slot::mlp_out_bias)]; }
  T* dpb() const { return grad[size_t(Slot::mlp_out_bias)]; }
  T* rw() const { return param[size_t(Slot::router_weight)]; }
  T* drw() const { return grad[size_t(Slot::router_weight)]; }
  T* rb() const { return param[size_t(Slot::router_bias)]; }
  T* drb() const { return grad[size_t(Slot::router_bias)]; }
  T* xw() const { return param[size_t(Slot::experts_in_weight)]; }
  T* dxw() const { return grad[size_t(Slot::experts_in_weight)]; }
  T* xpw() const { return param[size_t(Slot::experts_out_weight)]; }
  T* dxpw() const { return grad[size_t(Slot::experts_out_weight)]; }
  T* sgw() const { return param[size_t(Slot::shared_gate_weight)]; }
  T* dsgw() const { return grad[size_t(Slot::shared_gate_weight)]; }
  T* qnw() const { return param[size_t(Slot::q_norm_weight)]; }
  T* dqnw() const { return grad[size_t(Slot::q_norm_weight)]; }
  T* knw() const { return param[size_t(Slot::k_norm_weight)]; }
  T* dknw() const { return grad[size_t(Slot::k_norm_weight)]; }
  T* qaw() const { return param[size_t(Slot::q_down_weight)]; }
  T* dqaw() const { return grad[size_t(Slot::q_down_weight)]; }
  T* qan() const { return param[size_t(Slot::q_down_norm)]; }
  T* dqan() const { return grad[size_t(Slot::q_down_norm)]; }
  T* kvaw() const { return param[size_t(Slot::kv_down_weight)]; }
  T* dkvaw() const { return grad[size_t(Slot::kv_down_weight)]; }
  T* kvan() const { return param[size_t(Slot::kv_down_norm)]; }
  T* dkvan() const { return grad[size_t(Slot::kv_down_norm)]; }
  T* kvbw() const { return param[size_t(Slot::kv_up_weight)]; }
  T* dkvbw() const { return grad[size_t(Slot::kv_up_weight)]; }
  T* enw() const { return param[size_t(Slot::mtp_embed_norm)]; }
  T* denw() const { return grad[size_t(Slot::mtp_embed_norm)]; }
  T* hnw() const { return param[size_t(Slot::mtp_hidden_norm)]; }
  T* dhnw() const { return grad[size_t(Slot::mtp_hidden_norm)]; }
  T* ehw() const { return param[size_t(Slot::mtp_proj)]; }
  T* dehw() const { return grad[size_t(Slot::mtp_proj)]; }
  T* shnw() const { return param[size_t(Slot::mtp_head_norm)]; }
  T* dshnw() const { return grad[size_t(Slot::mtp_head_norm)]; }
  T* sinks() const { return param[size_t(Slot::attn_sinks)]; }
  T* dsinks() const { return grad[size_t(Slot::attn_sinks)]; }
  T* rlb() const { return param[size_t(Slot::router_logit_bias)]; }
  T* drlb() const { return grad[size_t(Slot::router_logit_bias)]; }
  T* xb() const { return param[size_t(Slot::experts_in_bias)]; }
  T* dxb() const { return grad[size_t(Slot::experts_in_bias)]; }
  T* xpb() const { return param[size_t(Slot::experts_out_bias)]; }
  T* dxpb() const { return grad[size_t(Slot::experts_out_bias)]; }
  MoeWeights<T> moe() const { return {rw(), rb(), xw(), xpw(), fcw(), pw(), sgw(), rlb(), xb(), xpb(), layer}; }
  MoeGrads<T> moe_grads() const { return {drw(), drb(), dxw(), dxpw(), dfcw(), dpw(), dsgw(), drlb(), dxb(), dxpb()}; }
};

// A GEMM input: its values, its 2-byte copy, or both (kernels::In16): the
// CPU's bf16 path reads 2-byte operands where the model has them
// (docs/precision.md). q8: a weight gradient's input kept as the FP8 codes
// its forward read (train.fp8.saved_inputs; f32 and b16 then null).
template <typename T>
struct GemmIn {
  const T* f32 = nullptr;
  const uint16_t* b16 = nullptr;
  const kernels::fp8::Operand8* q8 = nullptr;
};

}  // namespace trident::model
