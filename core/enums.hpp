// The closed sets of values a recipe or a command line can name, as enums
// with one name table each. Strings become these in the loader (core/recipe)
// or at a command line's boundary (launch/cli.cpp), or from the files that
// record them (a dataset record, a checkpoint index); nothing downstream compares
// a recipe string again (docs/architecture.md, "parse once").
// enum_name(e) gives the recipe spelling; parse_enum<E>(s) the value or
// nothing; enum_choices<E>() "a | b | c" for messages and docs.
#pragma once
#include <array>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/device.hpp"

namespace trident {

enum class Arch { gpt2, llama };
enum class MeshAxis { data, pipeline, tensor, context };
enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, zero_bubble, dualpipev };
enum class Precision { fp32, bf16, fp16 };
enum class Recompute { none, selective, full };
enum class LrDecay { constant, cosine, linear, wsd };
// optim.name; optim.muon.adjust_lr (torch.optim.Muon's adjust_lr_fn: original, match_rms_adamw,
// spectral_unclamped); optim.muon.ns_precision
enum class OptimizerKind { adamw, muon };
enum class MuonAdjustLr { original, match_rms_adamw, spectral };
enum class MuonPrecision { fp32, bf16 };
enum class NonFinite { stop, skip };
enum class ContextMode { ring, all_to_all };
// ZeRO 2-3 with several micro-batches a step: the gradients accumulate in a
// full-size buffer reduced once, or in the shard, reduced every micro-batch
enum class ZeroAccumulate { full, shard };
enum class TokenizerKind { byte, chars, hf_bpe, sentencepiece };
enum class RouterScore { softmax, sigmoid };  // a mixture-of-experts router's scores (model.moe.router.score)
// a mixture-of-experts model's load-balancing loss (model.moe.balance.kind)
enum class Balance { aux_loss, seq_aux_loss, hf, none };
// a layer's attention (model.attention): grouped-query, or multi-head latent (DeepSeek-V2/V3)
enum class AttentionKind { standard, mla };
// the rotary frequencies' scaling (model.rope_scaling.type), as transformers' rope_type
enum class RopeType { none, linear, llama3, yarn };
// model.layer_types: a layer's attention over the whole causal past, or a sliding window of it
enum class LayerAttention { full, sliding };
// model.moe.activation: the routed experts' SwiGLU, or gpt-oss's clamped one
enum class MoeActivation { swiglu, clamped_swiglu };
// train.fp8 (docs/precision.md#fp8-training): the scaling recipe, the
// formats (hybrid: e4m3 forward, e5m2 gradients), the module kinds kept in
// the high precision
enum class Fp8Recipe { none, tensorwise, delayed, blockwise };
enum class Fp8Format { e4m3, hybrid };
enum class Fp8Module { embedding, lm_head, router, norm, attention, mlp, experts, mtp, first_layer, last_layer };

template <typename E>
struct EnumNames;

// An enum's name table, at namespace trident scope (other folders name
// theirs with it after their own namespace: parallel::ActionType, ...).
#define TRIDENT_ENUM_NAMES(E, ...)                                                         \
  template <>                                                                              \
  struct EnumNames<E> {                                                                    \
    static constexpr auto table = std::to_array<std::pair<E, const char*>>({__VA_ARGS__}); \
  }

TRIDENT_ENUM_NAMES(Arch, {Arch::gpt2, "gpt2"}, {Arch::llama, "llama"});
TRIDENT_ENUM_NAMES(MeshAxis, {MeshAxis::tensor, "tensor"}, {MeshAxis::context, "context"}, {MeshAxis::data, "data"},
                   {MeshAxis::pipeline, "pipeline"});
TRIDENT_ENUM_NAMES(ContextMode, {ContextMode::ring, "ring"}, {ContextMode::all_to_all, "all_to_all"});
TRIDENT_ENUM_NAMES(ZeroAccumulate, {ZeroAccumulate::full, "full"}, {ZeroAccumulate::shard, "shard"});
TRIDENT_ENUM_NAMES(ScheduleKind, {ScheduleKind::gpipe, "gpipe"}, {ScheduleKind::one_f_one_b, "1f1b"},
                   {ScheduleKind::interleaved_1f1b, "interleaved_1f1b"}, {ScheduleKind::zero_bubble, "zero_bubble"},
                   {ScheduleKind::dualpipev, "dualpipev"});
TRIDENT_ENUM_NAMES(Precision, {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"});
TRIDENT_ENUM_NAMES(Recompute, {Recompute::none, "none"}, {Recompute::selective, "selective"},
                   {Recompute::full, "full"});
TRIDENT_ENUM_NAMES(OptimizerKind, {OptimizerKind::adamw, "adamw"}, {OptimizerKind::muon, "muon"});
TRIDENT_ENUM_NAMES(MuonAdjustLr, {MuonAdjustLr::original, "original"},
                   {MuonAdjustLr::match_rms_adamw, "match_rms_adamw"}, {MuonAdjustLr::spectral, "spectral"});
TRIDENT_ENUM_NAMES(MuonPrecision, {MuonPrecision::fp32, "fp32"}, {MuonPrecision::bf16, "bf16"});
TRIDENT_ENUM_NAMES(LrDecay, {LrDecay::constant, "constant"}, {LrDecay::cosine, "cosine"}, {LrDecay::linear, "linear"},
                   {LrDecay::wsd, "wsd"});
TRIDENT_ENUM_NAMES(NonFinite, {NonFinite::stop, "stop"}, {NonFinite::skip, "skip"});
TRIDENT_ENUM_NAMES(TokenizerKind, {TokenizerKind::byte, "byte"}, {TokenizerKind::chars, "char"},
                   {TokenizerKind::hf_bpe, "hf-bpe"}, {TokenizerKind::sentencepiece, "sentencepiece"});
TRIDENT_ENUM_NAMES(RouterScore, {RouterScore::softmax, "softmax"}, {RouterScore::sigmoid, "sigmoid"});
TRIDENT_ENUM_NAMES(Balance, {Balance::aux_loss, "aux_loss"}, {Balance::seq_aux_loss, "seq_aux_loss"},
                   {Balance::hf, "hf"}, {Balance::none, "none"});
TRIDENT_ENUM_NAMES(AttentionKind, {AttentionKind::standard, "standard"}, {AttentionKind::mla, "mla"});
TRIDENT_ENUM_NAMES(RopeType, {RopeType::none, "none"}, {RopeType::linear, "linear"}, {RopeType::llama3, "llama3"},
                   {RopeType::yarn, "yarn"});
TRIDENT_ENUM_NAMES(LayerAttention, {LayerAttention::full, "full"}, {LayerAttention::sliding, "sliding"});
TRIDENT_ENUM_NAMES(MoeActivation, {MoeActivation::swiglu, "swiglu"}, {MoeActivation::clamped_swiglu, "clamped_swiglu"});
TRIDENT_ENUM_NAMES(Fp8Recipe, {Fp8Recipe::none, "none"}, {Fp8Recipe::tensorwise, "tensorwise"},
                   {Fp8Recipe::delayed, "delayed"}, {Fp8Recipe::blockwise, "blockwise"});
TRIDENT_ENUM_NAMES(Fp8Format, {Fp8Format::e4m3, "e4m3"}, {Fp8Format::hybrid, "hybrid"});
TRIDENT_ENUM_NAMES(Fp8Module, {Fp8Module::embedding, "embedding"}, {Fp8Module::lm_head, "lm_head"},
                   {Fp8Module::router, "router"}, {Fp8Module::norm, "norm"}, {Fp8Module::attention, "attention"},
                   {Fp8Module::mlp, "mlp"}, {Fp8Module::experts, "experts"}, {Fp8Module::mtp, "mtp"},
                   {Fp8Module::first_layer, "first_layer"}, {Fp8Module::last_layer, "last_layer"});
TRIDENT_ENUM_NAMES(DeviceType, {DeviceType::cpu, "cpu"}, {DeviceType::cuda, "cuda"});

template <typename E>
const char* enum_name(E e) {
  for (const auto& [value, name] : EnumNames<E>::table)
    if (value == e) return name;
  return "?";
}

template <typename E>
std::optional<E> parse_enum(std::string_view s) {
  for (const auto& [value, name] : EnumNames<E>::table)
    if (s == name) return value;
  return std::nullopt;
}

template <typename E>
std::string enum_choices(const char* separator = " | ") {
  std::string out;
  for (const auto& [value, name] : EnumNames<E>::table) out += (out.empty() ? "" : separator) + std::string(name);
  return out;
}

template <typename E>
concept NamedEnum = requires {
  EnumNames<E>::table;
};

// Streams print the recipe spelling too (test messages).
template <NamedEnum E>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << enum_name(e);
}

}  // namespace trident

// fmt prints a named enum as its recipe spelling.
template <trident::NamedEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(E e, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(trident::enum_name(e), ctx);
  }
};
