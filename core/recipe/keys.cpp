// Every recipe key, declared once: path, type and range, default, and the
// line docs/recipes.md shows. The loader reads the keys in this order (a
// derived default may use the keys above it), the unknown-key check takes
// its lists of known keys from here, and `trident keys` prints the tables of
// docs/recipes.md from here (a test keeps the two equal).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <sstream>

#include "core/recipe/recipe.hpp"
#include "core/recipe/yaml_reader.hpp"

namespace trident::recipe_detail {

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A default: none (the key is required), a value, or a function of the keys
// read before it (with the text the docs show).
template <typename T>
struct Default {
  std::optional<T> value;
  std::function<T(const Recipe&)> derived;
  std::string text;
  std::optional<T> of(const Recipe& r) const { return derived ? std::optional<T>(derived(r)) : value; }
};
template <typename T>
Default<T> required() {
  return {std::nullopt, nullptr, "*required*"};
}
template <typename T>
Default<T> value(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return {v, nullptr, v ? "`true`" : "`false`"};
  else if constexpr (std::is_enum_v<T>)
    return {v, nullptr, fmt::format("`{}`", enum_name(v))};
  else
    return {v, nullptr, fmt::format("`{}`", v)};
}
template <typename F>
auto derived(std::string text, F f) {
  using T = std::decay_t<decltype(f(std::declval<const Recipe&>()))>;
  return Default<T>{std::nullopt, std::function<T(const Recipe&)>(f), std::move(text)};
}

enum class Open { none, low };

std::string bound(int64_t v) {
  if (v == (int64_t(1) << 40)) return "2^40";
  if (v == (int64_t(1) << 30)) return "2^30";
  if (v == (int64_t(1) << 24)) return "2^24";
  if (v == (int64_t(1) << 20)) return "2^20";
  if (v == (int64_t(1) << 16)) return "2^16";
  return fmt::format("{}", v);
}
std::string int_type(int64_t lo, int64_t hi) {
  return hi == kMax ? fmt::format("int >= {}", lo) : fmt::format("int in [{}, {}]", lo, bound(hi));
}

#define FIELD(member) \
  [](auto& r) -> auto& { return r.member; }

template <typename F>
Key integer(const char* path, F field, int64_t lo, int64_t hi, Default<int64_t> def, const char* doc) {
  return {{path, int_type(lo, hi), def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.integer(path, lo, hi, def.of(r)); },
          [=](const Recipe& r) { return fmt::format("{}", field(r)); }};
}
template <typename F>
Key real(const char* path, F field, double lo, double hi, Open open, Default<double> def, const char* doc) {
  const std::string type = fmt::format("number in {}{}, {:g}]", open == Open::low ? "(" : "[", lo, hi);
  return {{path, type, def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.real(path, lo, hi, def.of(r), open == Open::low); },
          [=](const Recipe& r) { return fmt::format("{}", field(r)); }};
}
template <typename F>
Key boolean(const char* path, F field, Default<bool> def, const char* doc) {
  return {{path, "bool", def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.boolean(path, *def.of(r)); },
          [=](const Recipe& r) { return std::string(field(r) ? "true" : "false"); }};
}
template <typename E, typename F>
Key choice(const char* path, F field, Default<E> def, const char* doc) {
  return {{path, "`" + enum_choices<E>("` \\| `") + "`", def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.enumerated<E>(path, def.of(r)); },
          [=](const Recipe& r) { return std::string(enum_name(field(r))); }};
}
template <typename F>
Key text(const char* path, F field, const char* default_text, const char* doc) {
  return {{path, "string", default_text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.text(path, ""); },
          [=](const Recipe& r) { return std::string(field(r)); }};
}
template <typename F>
Key integers(const char* path, F field, int64_t lo, int64_t hi, const char* default_text, const char* doc) {
  return {{path, "list of " + int_type(lo, hi).replace(0, 3, "ints"), default_text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.integers(path, lo, hi); },
          [=](const Recipe& r) { return fmt::format("[{}]", fmt::join(field(r), ", ")); }};
}
template <typename E, typename F>
Key choices(const char* path, F field, const char* default_text, const char* doc) {
  return {{path, "list of `" + enum_choices<E>("` \\| `") + "`", default_text, doc},
          [=](Reader& in, Recipe& r) {
            std::vector<E> out;
            for (const auto& name : in.texts(path, {})) {
              const auto e = parse_enum<E>(name);
              if (!e) in.bad(path, "a list of " + enum_choices<E>(", ") + ", found '" + name + "'");
              out.push_back(*e);
            }
            field(r) = out;
          },
          [=](const Recipe& r) {
            std::vector<std::string> names;
            for (E e : field(r)) names.push_back(enum_name(e));
            return fmt::format("[{}]", fmt::join(names, ", "));
          }};
}
template <typename F>
Key mesh_size(const char* path, F field, bool auto_by_default, const char* doc) {
  return {{path, "int >= 1 or `auto`", auto_by_default ? "`auto`" : "`1`", doc},
          [=](Reader& in, Recipe& r) { field(r) = in.mesh_size(path, auto_by_default); }};
}
template <typename F>
Key axes(const char* path, F field, const char* doc) {
  return {{path, "list: a permutation of `tensor`, `context`, `data`, `pipeline` (`context` may be left out)",
           "`[tensor, context, data, pipeline]`", doc},
          [=](Reader& in, Recipe& r) {
            const std::string expected = "a permutation of [" + enum_choices<MeshAxis>(", ") +
                                         "], or of [tensor, data, pipeline] (context then goes just inside data)";
            std::vector<MeshAxis> out;
            for (const auto& name : in.texts(path, {"tensor", "data", "pipeline"})) {
              const auto axis = parse_enum<MeshAxis>(name);
              if (!axis || std::count(out.begin(), out.end(), *axis)) in.bad(path, expected);
              out.push_back(*axis);
            }
            const bool named = std::count(out.begin(), out.end(), MeshAxis::context) > 0;
            if (out.size() != EnumNames<MeshAxis>::table.size() - (named ? 0 : 1)) in.bad(path, expected);
            field(r) = out;
          }};
}
template <typename F>
Key betas(const char* path, F field, const char* doc) {
  return {{path, "[b1, b2], each in [0, 1)", "`[0.9, 0.95]`", doc}, [=](Reader& in, Recipe& r) {
            const auto b = in.reals(path, 2, 0, 1, {0.9, 0.95});
            field(r) = {b[0], b[1]};
          }};
}
template <typename F>
Key coefficients(const char* path, F field, const char* doc) {
  return {{path, "[a, b, c], each in [-100, 100)", "`[3.4445, -4.775, 2.0315]`", doc}, [=](Reader& in, Recipe& r) {
            const auto c = in.reals(path, 3, -100, 100, {3.4445, -4.7750, 2.0315});
            field(r) = {c[0], c[1], c[2]};
          }};
}
template <typename F>
Key blend(const char* path, F field, const char* doc) {
  return {{path, "prefix, or list of `{path, weight}`", "—", doc},
          [=](Reader& in, Recipe& r) { field(r) = in.blend(path); }};
}
Key section(const char* path, const char* doc) { return {{path, "map", "present", doc}, nullptr}; }

int64_t default_ffn_hidden(const Recipe& r) {
  const int64_t C = r.model.hidden;
  return r.model.arch == Arch::gpt2 ? 4 * C : (8 * C / 3 + 63) / 64 * 64;
}

const std::vector<Key>& table() {
  static const std::vector<Key> keys = {
      choice<Arch>("model.arch", FIELD(model.arch), required<Arch>(),
                   "GPT-2: LayerNorm, GELU (tanh), learned positions, biases, tied embeddings. LLaMA: RMSNorm, SwiGLU, "
                   "RoPE, grouped-query attention, no biases, untied head"),
      integer("model.layers", FIELD(model.layers), 1, 100000, required<int64_t>(), "transformer blocks"),
      integer("model.hidden", FIELD(model.hidden), 1, 1 << 20, required<int64_t>(),
              "model width C; must be divisible by `heads` unless `head_dim` is given"),
      integer("model.heads", FIELD(model.heads), 1, 1 << 16, required<int64_t>(), "query heads H"),
      integer("model.kv_heads", FIELD(model.kv_heads), 1, 1 << 16,
              derived("`heads`", [](const Recipe& r) { return r.model.heads; }),
              "key/value heads (grouped-query attention); `heads % kv_heads == 0`; gpt2 requires `kv_heads == heads`"),
      integer("model.head_dim", FIELD(model.head_size), 1, 1 << 16,
              derived("`hidden / heads`",
                      [](const Recipe& r) { return r.model.heads > 0 ? r.model.hidden / r.model.heads : 0; }),
              "each query, key and value head's size D (transformers' `head_dim`): the projections are `q_proj` "
              "`[heads D, hidden]`, `k_proj` and `v_proj` `[kv_heads D, hidden]`, `o_proj` `[hidden, heads D]` "
              "(Qwen3: 128 at every width; Mistral-Nemo: 128 on a 5120-wide model); llama with standard attention; "
              "even (rotary); gpt2: `hidden / heads` only"),
      integer("model.ffn_hidden", FIELD(model.ffn_hidden), 1, 1 << 24,
              derived("gpt2: `4 * hidden`; llama: `8/3 * hidden` rounded up to 64", default_ffn_hidden), "MLP width F"),
      integer("model.seq_len", FIELD(model.seq_len), 1, 1 << 24, required<int64_t>(),
              "context length T (also the size of GPT-2's position table)"),
      integer("model.vocab", FIELD(model.vocab), 2, 1 << 30, required<int64_t>(),
              "vocabulary V; must cover every token id of the data"),
      real("model.rope_theta", FIELD(model.rope_theta), 0, 1e12, Open::low, value<double>(10000.0),
           "RoPE base (llama)"),
      section("model.rope_scaling",
              "the rotary frequencies' scaling, as transformers' `rope_parameters` (`rope_scaling`) compute them "
              "(llama; [Rope scaling](#rope-scaling)); without it plain RoPE"),
      choice<RopeType>("model.rope_scaling.type", FIELD(model.rope_scaling.type), value(RopeType::none),
                       "`rope_type`: `none`; `linear` (every frequency / `factor`); `llama3` (Llama 3.1-3.3); "
                       "`yarn` (DeepSeek-V3, gpt-oss, Qwen's long context)"),
      real("model.rope_scaling.factor", FIELD(model.rope_scaling.factor), 0, 1e6, Open::low, value<double>(1.0),
           "`factor`: how much longer the context is than the one pretrained"),
      integer("model.rope_scaling.original_seq_len", FIELD(model.rope_scaling.original_seq_len), 0, 1 << 30,
              value<int64_t>(0),
              "`original_max_position_embeddings`: the pretrained context (llama3 and yarn: required)"),
      real("model.rope_scaling.low_freq_factor", FIELD(model.rope_scaling.low_freq_factor), 0, 1e6, Open::low,
           value<double>(1.0),
           "`low_freq_factor` (llama3): wavelengths past `original_seq_len / low_freq_factor` "
           "are divided by `factor`"),
      real("model.rope_scaling.high_freq_factor", FIELD(model.rope_scaling.high_freq_factor), 0, 1e6, Open::low,
           value<double>(4.0),
           "`high_freq_factor` (llama3): wavelengths under `original_seq_len / "
           "high_freq_factor` are kept; a smooth blend between the two"),
      real("model.rope_scaling.beta_fast", FIELD(model.rope_scaling.beta_fast), 0, 1e6, Open::low, value<double>(32.0),
           "`beta_fast` (yarn): rotations at `original_seq_len` above which a dimension "
           "extrapolates"),
      real("model.rope_scaling.beta_slow", FIELD(model.rope_scaling.beta_slow), 0, 1e6, Open::low, value<double>(1.0),
           "`beta_slow` (yarn): rotations below which a dimension interpolates"),
      real("model.rope_scaling.mscale", FIELD(model.rope_scaling.mscale), 0, 1e6, Open::none, value<double>(0.0),
           "`mscale` (yarn): with `mscale_all_dim`, cos and sin scale by mscale(factor, mscale) / mscale(factor, "
           "mscale_all_dim), mscale(s, m) = 0.1 m ln s + 1; 0: by mscale(factor, 1)"),
      real("model.rope_scaling.mscale_all_dim", FIELD(model.rope_scaling.mscale_all_dim), 0, 1e6, Open::none,
           value<double>(0.0),
           "`mscale_all_dim` (yarn): see `mscale`; multi-head latent attention's softmax scale "
           "also times mscale(factor, mscale_all_dim)^2 (DeepSeek-V3)"),
      boolean("model.rope_scaling.truncate", FIELD(model.rope_scaling.truncate), value(true),
              "`truncate` (yarn): the ramp's ends rounded to whole dimensions (gpt-oss: false)"),
      real("model.norm_eps", FIELD(model.norm_eps), 0, 1, Open::low, value<double>(1e-5),
           "LayerNorm / RMSNorm epsilon"),
      real("model.init_std", FIELD(model.init_std), 0, 10, Open::low, value<double>(0.02),
           "std of the normal initialisation of weights and embeddings; GPT-2's residual projections (`attn.c_proj`, "
           "`mlp.c_proj`) use `init_std / sqrt(2 * layers)`"),
      boolean("model.tie_embeddings", FIELD(model.tie_embeddings),
              derived("gpt2: `true`, llama: `false`", [](const Recipe& r) { return r.model.arch == Arch::gpt2; }),
              "LM head shares the token embedding"),
      integer(
          "model.vocab_multiple", FIELD(model.vocab_multiple), 1, 1 << 16, value<int64_t>(64),
          "the token table and LM head get `vocab` rounded up to a multiple of `vocab_multiple x parallel.tensor` rows "
          "(Megatron's `make-vocab-size-divisible-by`); padded logits are masked (never win, never take probability), "
          "their rows get no gradient, and export strips them. `1`: pad only to a multiple of the tensor size"),
      boolean("model.qk_norm", FIELD(model.qk_norm), value(false),
              "RMSNorm over each query and key head (weights `self_attn.q_norm.weight`, `k_norm.weight` of size "
              "`head_dim`) after the projection and before rotary, as Qwen3 (llama; under tensor parallelism its "
              "weights' gradients, each rank's over its heads, are summed over the tensor group)"),
      boolean("model.attention_bias", FIELD(model.attention_bias), value(false),
              "biases on `q_proj`, `k_proj`, `v_proj` (`self_attn.{q,k,v}_proj.bias`; Qwen2 and Qwen2.5 always, "
              "transformers' Llama with `attention_bias`; llama with standard attention; tensor-parallel split like "
              "their weights)"),
      boolean("model.o_bias", FIELD(model.o_bias), value(false),
              "a bias on `o_proj` (`self_attn.o_proj.bias`: gpt-oss, transformers' Llama with `attention_bias`; "
              "llama with standard attention; added once after the tensor group's sum)"),
      integer("model.sliding_window", FIELD(model.sliding_window), 0, 1 << 30, value<int64_t>(0),
              "sliding-window attention (transformers' `sliding_window`): in the layers `layer_types` marks "
              "`sliding`, query t sees only keys s with t - s < sliding_window (itself and the window - 1 before "
              "it), under document masking too; the CPU and CUDA kernels skip the key tiles outside, context "
              "parallelism (both modes) masks by global position, the planner counts the window's FLOPs. `0`: none"),
      choices<LayerAttention>(
          "model.layer_types", FIELD(model.layer_types), "every layer `sliding` when `sliding_window` > 0",
          "each layer's attention, one entry per layer (transformers' `layer_types`: `full_attention` is `full`, "
          "`sliding_attention` `sliding`; gpt-oss alternates, starting with `sliding`); multi-token prediction "
          "blocks attend fully"),
      boolean("model.attention_sinks", FIELD(model.attention_sinks), value(false),
              "gpt-oss's attention sinks: one learned logit per query head (`self_attn.sinks` [heads]) joins every "
              "row's softmax denominator and takes no value; trained with its gradient, split over the tensor "
              "group by heads"),
      choice<AttentionKind>(
          "model.attention", FIELD(model.attention), value(AttentionKind::standard),
          "`standard`: grouped-query attention with `heads`, `kv_heads` of size `head_dim`; `mla`: multi-head "
          "latent attention (DeepSeek-V2/V3, Kimi K2; llama; on cuda query heads up to 256 values), sized by "
          "`model.mla` ([mla.md](mla.md))"),
      section("model.mla",
              "multi-head latent attention's sizes (`model.attention: mla`; [mla.md](mla.md)); the "
              "defaults are DeepSeek-V3's"),
      integer("model.mla.q_lora_rank", FIELD(model.mla.q_lora_rank), 0, 1 << 20, value<int64_t>(1536),
              "rank of the query latent (`q_a_proj`, `q_a_layernorm`, `q_b_proj`); 0: one projection `q_proj` "
              "(DeepSeek-V2-Lite's `q_lora_rank: null`)"),
      integer("model.mla.kv_lora_rank", FIELD(model.mla.kv_lora_rank), 1, 1 << 20, value<int64_t>(512),
              "rank of the key/value latent (`kv_a_proj_with_mqa`, `kv_a_layernorm`, `kv_b_proj`)"),
      integer("model.mla.qk_nope_head_dim", FIELD(model.mla.qk_nope_head_dim), 1, 1 << 16, value<int64_t>(128),
              "each query and key head's part without positions"),
      integer("model.mla.qk_rope_head_dim", FIELD(model.mla.qk_rope_head_dim), 2, 1 << 16, value<int64_t>(64),
              "each query head's rotary part, and the one rotary key part all heads share; even"),
      integer("model.mla.v_head_dim", FIELD(model.mla.v_head_dim), 1, 1 << 16, value<int64_t>(128),
              "each value head's size (the attention kernels take it apart from the query heads'; up to 256 "
              "on CUDA)"),
      section("model.mtp", "multi-token prediction (DeepSeek-V3; llama; [mtp.md](mtp.md)); without it none"),
      integer("model.mtp.depth", FIELD(model.mtp.depth), 1, 64, Default<int64_t>{1, nullptr, "`1` with `model.mtp`"},
              "prediction depths D: module k (1..D) predicts the token k + 1 ahead, a transformer block of its own "
              "(`model.layers.{layers + k - 1}.*`, as DeepSeek-V3's `num_nextn_predict_layers`), on the last "
              "pipeline stage"),
      real("model.mtp.loss_weight", FIELD(model.mtp.loss_weight), 0, 1e6, Open::none, value(0.3),
           "lambda: the training loss adds `lambda / D x sum_k L_k`, L_k the mean cross-entropy of depth k over its "
           "`T - k` positions of each sequence (DeepSeek-V3: 0.3, then 0.1)"),
      section("model.moe", "mixture-of-experts MLPs (llama; [moe.md](moe.md)); without it every layer is dense"),
      integer("model.moe.experts", FIELD(model.moe.experts), 2, 1 << 16,
              Default<int64_t>{0, nullptr, "*required with `model.moe`*"},
              "routed experts E per MoE layer (`num_local_experts`, `n_routed_experts`); required with `model.moe`"),
      integer("model.moe.top_k", FIELD(model.moe.top_k), 1, 1 << 16, value<int64_t>(2),
              "experts each token is routed to (`num_experts_per_tok`); `<= experts`"),
      integer("model.moe.ffn_hidden", FIELD(model.moe.ffn_hidden), 1, 1 << 24,
              derived("`model.ffn_hidden`", [](const Recipe& r) { return r.model.ffn_hidden; }),
              "each routed expert's SwiGLU width I (`moe_intermediate_size`; Mixtral's `intermediate_size`)"),
      integer("model.moe.shared_experts", FIELD(model.moe.shared_experts), 0, 1 << 16, value<int64_t>(0),
              "always-on experts every token passes through (`n_shared_experts`; Qwen2-MoE: 1), run as one SwiGLU "
              "MLP of width `shared_experts x shared_ffn_hidden` whose output is added to the routed one"),
      integer("model.moe.shared_ffn_hidden", FIELD(model.moe.shared_ffn_hidden), 1, 1 << 24,
              derived("`model.moe.ffn_hidden`", [](const Recipe& r) { return r.model.moe.ffn_hidden; }),
              "each shared expert's width (Qwen2-MoE's `shared_expert_intermediate_size` with `shared_experts: 1`)"),
      boolean("model.moe.shared_expert_gate", FIELD(model.moe.shared_expert_gate), value(false),
              "Qwen2-MoE's gate: the shared output is multiplied by `sigmoid(x . w_g)`, `w_g` of shape [1, hidden] "
              "(`mlp.shared_expert_gate.weight`); needs `shared_experts >= 1`"),
      integer("model.moe.first_dense", FIELD(model.moe.first_dense), 0, 100000, value<int64_t>(0),
              "layers `[0, first_dense)` keep the dense MLP (`first_k_dense_replace`)"),
      integer("model.moe.every", FIELD(model.moe.every), 1, 100000, value<int64_t>(1),
              "layer `l` is an MoE layer when `(l + 1) % every == 0` (Qwen's `decoder_sparse_step`; 1: every layer)"),
      integers("model.moe.dense_layers", FIELD(model.moe.dense_layers), 0, 100000, "`[]`",
               "layers that keep the dense MLP whatever `first_dense` and `every` say (Qwen's `mlp_only_layers`)"),
      section("model.moe.router", "how each token's experts are chosen and weighted ([moe.md](moe.md#the-router))"),
      choice<RouterScore>("model.moe.router.score", FIELD(model.moe.score), value(RouterScore::softmax),
                          "`softmax` over all experts (Mixtral, Qwen-MoE) or a `sigmoid` per expert (DeepSeek-V3, "
                          "GLM-4-MoE, which also holds the correction bias `mlp.gate.e_score_correction_bias`)"),
      boolean("model.moe.router.norm_topk", FIELD(model.moe.norm_topk), value(true),
              "divide the chosen experts' weights by their sum (`norm_topk_prob`; Mixtral always does)"),
      integer("model.moe.router.groups", FIELD(model.moe.groups), 1, 1 << 16, value<int64_t>(1),
              "expert groups for group-limited choice (`n_group`); `experts % groups == 0`; 1: none"),
      integer("model.moe.router.group_topk", FIELD(model.moe.group_topk), 1, 1 << 16,
              derived("`groups`", [](const Recipe& r) { return r.model.moe.groups; }),
              "groups a token may choose from, those whose two best (biased) scores sum highest (`topk_group`); "
              "`top_k <= group_topk x experts / groups`"),
      real("model.moe.router.scaling", FIELD(model.moe.scaling), 0, 1e6, Open::low, value(1.0),
           "the routed weights are multiplied by this (`routed_scaling_factor`)"),
      boolean("model.moe.router.bias", FIELD(model.moe.router_bias), value(false),
              "a learned bias on the router's logits (gpt-oss's `mlp.router.bias` [experts]): it moves the choice "
              "and the weights, and is trained with its gradient (unlike `balance.bias_rate`'s correction bias)"),
      section("model.moe.balance", "load balancing ([moe.md](moe.md#load-balancing))"),
      choice<Balance>(
          "model.moe.balance.kind", FIELD(model.moe.balance), value(Balance::aux_loss),
          "`aux_loss`: Switch-style, per micro-batch and layer, `coef x E / (k N^2) x sum_e count_e sum_n p_ne`; "
          "`seq_aux_loss`: DeepSeek-V3's per-sequence form; `hf`: transformers' cross-layer form "
          "(`load_balancing_loss_func`: softmax routers without groups, one pipeline stage); `none`"),
      real("model.moe.balance.coef", FIELD(model.moe.balance_coef), 0, 1e6, Open::none, value(0.01),
           "weight of the balancing loss in the training loss (`router_aux_loss_coef`)"),
      real("model.moe.balance.z_loss", FIELD(model.moe.z_loss), 0, 1e6, Open::none, value(0.0),
           "weight of the router z-loss, `mean_n logsumexp(logits_n)^2` per layer; 0: none"),
      real("model.moe.balance.bias_rate", FIELD(model.moe.bias_rate), 0, 1e6, Open::none, value(0.0),
           "aux-loss-free balancing (DeepSeek-V3): after each optimizer step the correction bias moves by "
           "`bias_rate x sign(mean - count)` from the step's counts over every rank; 0: the bias stays as loaded"),
      real("model.moe.capacity_factor", FIELD(model.moe.capacity_factor), 0, 1e6, Open::none, value(0.0),
           "0: dropless (every routed token is computed); token dropping is not supported yet"),
      boolean("model.moe.expert_bias", FIELD(model.moe.expert_bias), value(false),
              "biases on each routed expert's gate|up and down projections (gpt-oss's `gate_up_proj_bias` [experts, "
              "2 ffn_hidden], `down_proj_bias` [experts, hidden]); the down bias is weighted by the route like the "
              "expert's output, and added once after the tensor group's sum"),
      choice<MoeActivation>("model.moe.activation", FIELD(model.moe.activation), value(MoeActivation::swiglu),
                            "the routed experts' activation: `swiglu` silu(gate) up; `clamped_swiglu` (gpt-oss) g "
                            "sigmoid(swiglu_alpha g) (u + 1) with g = min(gate, swiglu_limit), u = clamp(up, "
                            "-swiglu_limit, swiglu_limit); shared experts keep `swiglu`"),
      real("model.moe.swiglu_alpha", FIELD(model.moe.swiglu_alpha), 0, 1e6, Open::low, value(1.702),
           "clamped_swiglu's sigmoid slope (transformers' `swiglu_alpha`)"),
      real("model.moe.swiglu_limit", FIELD(model.moe.swiglu_limit), 0, 1e6, Open::low, value(7.0),
           "clamped_swiglu's clamp (transformers' `swiglu_limit`)"),
      mesh_size("parallel.data", FIELD(parallel.data), true,
                "data-parallel size; `auto`: the world size over `tensor x pipeline x context` (as Megatron-Core and "
                "torchtitan infer it; the start-up line says what was inferred), or 1 when `tensor` or `pipeline` is "
                "`auto`"),
      mesh_size(
          "parallel.tensor", FIELD(parallel.tensor), false,
          "tensor-parallel size (docs/parallelism.md); `heads % tensor == 0`, `ffn_hidden % tensor == 0`; `kv_heads % "
          "tensor == 0` when `kv_heads >= tensor`, else `tensor % kv_heads == 0` (KV heads replicated)"),
      mesh_size("parallel.pipeline", FIELD(parallel.pipeline), false,
                "pipeline stages; `layers % (pipeline * virtual_stages) == 0`"),
      integer(
          "parallel.context", FIELD(parallel.context), 1, 65536, value<int64_t>(1),
          "context-parallel size ([parallelism.md](parallelism.md#context-parallelism)): each sequence is split "
          "over this many ranks, each holding chunks `i` and `2 x context - 1 - i` of `2 x context`; `seq_len % (2 x "
          "context) == 0`; gradients are reduced and ZeRO shards over `data x context`"),
      integer("parallel.expert", FIELD(parallel.expert), 1, 65536, value<int64_t>(1),
              "expert-parallel size ([parallelism.md](parallelism.md#expert-parallelism)): each MoE layer's experts "
              "are split over this many ranks, carved out of `data x context` as Megatron-Core folds its expert "
              "grid; `model.moe.experts % expert == 0` and `expert` divides `data x context`; the rest of `data x "
              "context` is the expert-data group, over which the experts' gradients reduce and ZeRO shards them "
              "(`trident topology` shows the groups)"),
      integer("parallel.expert_tensor", FIELD(parallel.expert_tensor), 0, 65536, value<int64_t>(0),
              "how many ranks split each expert's FFN: 0 or `tensor` (the dense layers' split), or 1: each expert "
              "whole on one rank, the expert group carved out of `data x context x tensor` (each tensor rank "
              "routes its `1/tensor` of the rows; `expert x 1` divides `data x context x tensor`; balance kinds "
              "`aux_loss` and `none`; CPU); other values are refused"),
      choice<ContextMode>(
          "parallel.context_mode", FIELD(parallel.context_mode), value<ContextMode>(ContextMode::ring),
          "how attention sees the other ranks' keys: `ring` passes key/value blocks around the context "
          "group (asynchronous send/receive overlapped with the block in hand, merged by log-sum-exp); "
          "`all_to_all` (Ulysses) re-shards heads for attention and back, which needs this rank's heads "
          "(`heads / tensor`) and KV heads divisible by `context`"),
      axes("parallel.order", FIELD(parallel.order),
           "mesh dimensions from innermost (adjacent ranks) to outermost; a list without `context` gets it just "
           "inside `data`"),
      choice<ScheduleKind>(
          "parallel.schedule", FIELD(parallel.schedule), value<ScheduleKind>(ScheduleKind::one_f_one_b),
          "pipeline schedule ([parallelism.md](parallelism.md#pipeline-parallelism)); `interleaved_1f1b` needs "
          "`virtual_stages >= 2` and micro-batches per step (`global_batch / (micro_batch x data)`) a multiple of "
          "`pipeline`; `dualpipev` needs `virtual_stages: 2`, at least `2 x pipeline` micro-batches per step, untied "
          "embeddings; the others need `virtual_stages: 1`; `zero_bubble` and `dualpipev` need "
          "`train.recompute` "
          "none or selective"),
      integer("parallel.virtual_stages", FIELD(parallel.virtual_stages), 1, 1024, value<int64_t>(1),
              "model chunks per pipeline rank (`interleaved_1f1b`; 2 for `dualpipev`)"),
      boolean("parallel.overlap_paired", FIELD(parallel.overlap_paired), value<bool>(true),
              "`dualpipev` with MoE layers and `expert > 1`: each paired forward and backward (chunks of different "
              "micro-batches) run as paired passes on one thread, switching at every expert dispatch and combine so "
              "that one's tokens travel while the other computes, as DualPipe overlaps them "
              "([parallelism.md](parallelism.md#dualpipev)); every ZeRO stage, with recompute none or selective "
              "(dualpipev refuses full). `false`: "
              "one after the other"),
      integer("parallel.zero", FIELD(parallel.zero), 0, 3, value<int64_t>(0),
              "ZeRO stage of the data-parallel group: 0 replicate, 1 shard optimizer state, 2 also gradients, 3 also "
              "parameters"),
      integer("parallel.data_shard", FIELD(parallel.data_shard), 0, 1 << 24, value<int64_t>(0),
              "HSDP ([parallelism.md](parallelism.md#hsdp)): the ZeRO shard group's size, a divisor of `data x "
              "context`; 0: all of `data x context` (plain ZeRO). Shard groups are runs of consecutive ranks of "
              "`data x context` (a node); gradients are reduce-scattered and parameters all-gathered inside them, and "
              "each rank's shard is all-reduced over the `data_replicate` groups that hold the same shard; needs "
              "`zero >= 1` when smaller than `data x context`"),
      integer("parallel.data_replicate", FIELD(parallel.data_replicate), 0, 1 << 24, value<int64_t>(0),
              "HSDP: how many replicas of the shard group; 0: `data x context / data_shard`. Given with "
              "`data_shard`, `data_replicate x data_shard` must equal `data x context`"),
      choice<ZeroAccumulate>(
          "parallel.zero_accumulate", FIELD(parallel.zero_accumulate), value<ZeroAccumulate>(ZeroAccumulate::full),
          "ZeRO 2 and 3 with several micro-batches a step: `full` accumulates the gradients in a full-size fp32 "
          "buffer (4P bytes) reduce-scattered once, during the last micro-batch's backward; `shard` "
          "reduce-scatters every micro-batch's gradients, segment by segment as its backward produces them, and "
          "adds them into the fp32 shard (4P/d bytes and the windows in flight; a reduction per micro-batch), as "
          "DeepSpeed, FSDP2 and Megatron-FSDP do ([parallelism.md](parallelism.md#zero)); with a pipeline each chunk's "
          "backward "
          "is added as it finishes (not with tied embeddings over pipeline stages)"),
      boolean("parallel.sequence_parallel", FIELD(parallel.sequence_parallel), value<bool>(false),
              "Megatron sequence parallelism: with `tensor > 1`, norms, residual adds and the other token-wise work "
              "run on `1/tensor` of the micro-batch's token rows, and the tensor-parallel regions all-gather before / "
              "reduce-scatter after instead of all-reducing. Needs `micro_batch x seq_len` divisible by `tensor`; no "
              "effect with `tensor: 1`"),
      integer("parallel.bucket_bytes", FIELD(parallel.bucket_bytes), 1024, kMax, value<int64_t>(int64_t(25) << 20),
              "gradient bucket size for ZeRO 0 and 1 (stages 2 and 3 reduce per model segment)"),
      integers("parallel.stage_layers", FIELD(parallel.stage_layers), 0, 100000, "even split",
               "layers of each of the `pipeline x virtual_stages` chunks in global chunk order (chunk `v x pipeline + "
               "p` is on stage `p`; under `dualpipev` chunks `p` and `2 x pipeline - 1 - p`); must have that many "
               "entries and sum to `model.layers`. Without it `layers % "
               "(pipeline x virtual_stages) == 0` is required"),
      real("parallel.timeout_s", FIELD(parallel.timeout_s), 0, 1e7, Open::low, value<double>(600.0),
           "a hang is an error: a pipeline transfer (naming the transfer, chunk, micro-batch and peer) or any other "
           "collective or point-to-point operation (naming the operation, its size, the group, this rank's place in "
           "it, and for transfers the peer's world rank and tag) that does not complete within this many seconds stops "
           "the job ([slurm.md](slurm.md#when-something-goes-wrong))"),
      integer("train.global_batch", FIELD(train.global_batch), 1, int64_t(1) << 24, required<int64_t>(),
              "sequences per optimizer step; divisible by `micro_batch * data`"),
      integer("train.micro_batch", FIELD(train.micro_batch), 1, int64_t(1) << 24, required<int64_t>(),
              "sequences per forward/backward; `global_batch / (micro_batch * data)` micro-batches are accumulated per "
              "step"),
      integer("train.steps", FIELD(train.steps), 1, int64_t(1) << 40, required<int64_t>(),
              "optimizer steps; `steps * global_batch` (the samples of the run) at most 2^48"),
      choice<Precision>("train.precision", FIELD(train.precision), value<Precision>(Precision::fp32),
                        "`bf16`/`fp16`: mixed precision — activations, activation gradients and the parameters the "
                        "model computes with are stored in the 16-bit format; math, parameter-gradient accumulation, "
                        "fp32 master weights and Adam moments stay fp32 (docs/precision.md). On CPU the 16-bit values "
                        "are held in fp32 buffers, rounded at every store"),
      real("train.loss_scale", FIELD(train.loss_scale), 0, 1e38, Open::low,
           derived("`65536` for `fp16`, else `1`",
                   [](const Recipe& r) { return r.train.precision == Precision::fp16 ? 65536.0 : 1.0; }),
           "fp16's initial dynamic loss scale (only fp16 may set it)"),
      integer("train.loss_scale_window", FIELD(train.loss_scale_window), 1, kMax, value<int64_t>(1000),
              "fp16: clean steps after which the scale doubles"),
      real("train.min_loss_scale", FIELD(train.min_loss_scale), 0, 1e38, Open::low, value<double>(1.0),
           "fp16: the scale never halves below this; `<= loss_scale`"),
      choice<Recompute>("train.recompute", FIELD(train.recompute), value<Recompute>(Recompute::none),
                        "activation recomputation: `selective` drops the attention log-sum-exp and recomputes it "
                        "in backward; `full` keeps only each layer's input and reruns the layer's forward in backward. "
                        "Gradients are bitwise identical in all three modes"),
      choice<NonFinite>(
          "train.nonfinite", FIELD(train.nonfinite), value<NonFinite>(NonFinite::stop),
          "a step whose loss or gradient norm is inf/NaN (fp16: whose loss is; gradient overflows are the "
          "loss scaler's): `stop` ends the run with an error before the update, naming the first "
          "parameter with a non-finite gradient; `skip` drops the step's update, logs and counts it, and "
          "stops after `nonfinite_limit` in a row. No checkpoint is ever written from a non-finite state"),
      integer("train.nonfinite_limit", FIELD(train.nonfinite_limit), 1, kMax, value<int64_t>(5),
              "`nonfinite: skip`: consecutive skipped steps after which the run stops"),
      integer("train.threads", FIELD(train.threads), 0, 4096, value<int64_t>(0),
              "CPU threads per rank; 0 = `OMP_NUM_THREADS` when set, else the node's cores divided by its ranks"),
      real("optim.lr", FIELD(optim.lr), 0, 10, Open::low, required<double>(), "peak learning rate"),
      real("optim.min_lr", FIELD(optim.min_lr), 0, 10, Open::none, value<double>(0.0),
           "final learning rate of the decay; `min_lr <= lr`"),
      integer("optim.warmup", FIELD(optim.warmup), 0, kMax, value<int64_t>(0),
              "linear warmup steps: `lr * (s + 1) / warmup`"),
      choice<LrDecay>("optim.decay", FIELD(optim.decay), value<LrDecay>(LrDecay::cosine),
                      "schedule after warmup (formulas in `optim/lr_schedule.hpp`)"),
      real("optim.wsd_decay_fraction", FIELD(optim.wsd_decay_fraction), 0, 1, Open::low, value<double>(0.2),
           "`wsd` (warmup-stable-decay): fraction of all steps spent in the final linear decay"),
      betas("optim.betas", FIELD(optim.betas), "Adam betas"),
      real("optim.eps", FIELD(optim.eps), 0, 1, Open::low, value<double>(1e-8), "Adam epsilon"),
      real("optim.weight_decay", FIELD(optim.weight_decay), 0, 10, Open::none, value<double>(0.0),
           "decoupled weight decay (AdamW)"),
      real("optim.grad_clip", FIELD(optim.grad_clip), 0, 1e9, Open::none, value<double>(1.0),
           "clip the global gradient norm to this; 0 disables"),
      boolean("optim.decay_norms_and_biases", FIELD(optim.decay_norms_and_biases), value<bool>(false),
              "apply weight decay to norm weights and biases too"),
      boolean("optim.decay_embeddings", FIELD(optim.decay_embeddings), value<bool>(false),
              "apply weight decay to embeddings (a tied LM head follows this)"),
      choice<OptimizerKind>(
          "optim.name", FIELD(optim.name), value(OptimizerKind::adamw),
          "`adamw`; `muon`: torch.optim.Muon for the hidden matrices (attention and MLP projections, "
          "each expert's matrices one by one, MLA's down and up projections), AdamW with the keys "
          "above for the rest (embeddings, LM head, norms, biases, routers, MTP's projection) "
          "([optim.md](optim.md#muon)); every mesh (each matrix orthogonalised whole by one owner rank); CPU only"),
      section("optim.muon", "Muon's keys (`optim.name: muon`), torch.optim.Muon's"),
      real("optim.muon.momentum", FIELD(optim.muon.momentum), 0, 1, Open::none, value(0.95),
           "momentum mu: buf = mu buf + (1 - mu) g (torch's lerp)"),
      boolean("optim.muon.nesterov", FIELD(optim.muon.nesterov), value(true),
              "orthogonalise (1 - mu) g + mu buf rather than buf"),
      integer("optim.muon.ns_steps", FIELD(optim.muon.ns_steps), 1, 99, value<int64_t>(5), "Newton-Schulz iterations"),
      coefficients("optim.muon.ns_coefficients", FIELD(optim.muon.ns_coefficients),
                   "the quintic iteration's (a, b, c): X <- a X + (b A + c A^2) X, A = X X^T"),
      choice<MuonAdjustLr>("optim.muon.adjust_lr", FIELD(optim.muon.adjust_lr), value(MuonAdjustLr::original),
                           "the update's scale for an A x B matrix: `original` sqrt(max(1, A / B)) (Keller Jordan's); "
                           "`match_rms_adamw` 0.2 sqrt(max(A, B)) (Moonlight: AdamW's lr and weight decay carry "
                           "over); `spectral` sqrt(A / B) (torch's spectral_unclamped)"),
      choice<MuonPrecision>("optim.muon.ns_precision", FIELD(optim.muon.ns_precision), value(MuonPrecision::bf16),
                            "the iteration's arithmetic: `bf16` as torch.optim.Muon (bf16 operands and results, "
                            "float32 accumulation); `fp32` exact to compare"),
      real("optim.muon.weight_decay", FIELD(optim.muon.weight_decay), 0, 10, Open::none,
           derived("`optim.weight_decay`", [](const Recipe& r) { return r.optim.weight_decay; }),
           "decoupled weight decay of the Muon matrices: p <- p (1 - lr weight_decay), at the unadjusted lr"),
      integer("optim.muon.rounds", FIELD(optim.muon.rounds), 1, 1024, value<int64_t>(4),
              "tensor parallelism: the matrices' exchanges with their owner ranks go in this many rounds, each in "
              "flight while the round before is orthogonalised (1: one exchange each way, no overlap)"),
      section("optim.muon.qk_clip", "QK-clip (Kimi K2's MuonClip, [optim.md](optim.md#qk-clip))"),
      boolean("optim.muon.qk_clip.on", FIELD(optim.muon.qk_clip.on), value(false),
              "after each update, scale the query and key weights of every head whose largest attention logit of "
              "the step exceeded the threshold, so that its logits shrink to it"),
      real("optim.muon.qk_clip.threshold", FIELD(optim.muon.qk_clip.threshold), 0, 1e6, Open::low, value(100.0),
           "tau: the largest logit (the scaled q . k) a head may keep (Kimi K2: 100)"),
      blend(
          "data.train", FIELD(data.train),
          "Megatron indexed dataset `PREFIX` (`PREFIX.bin` / `PREFIX.idx`, see [data.md](data.md)), or a weighted "
          "blend: a list of `{path: PREFIX, weight: W}`; each sample comes from the dataset furthest below its share"),
      blend("data.valid", FIELD(data.valid),
            "validation split(s), same forms; a blend reports a validation loss per dataset; without it no "
            "evaluation runs"),
      boolean("data.document_mask", FIELD(data.document_mask), value(false),
              "attention stays inside each document of a sample (documents end at the dataset's EOD token) and "
              "positions (learned and rotary) restart at each document"),
      boolean("data.mask_eod_loss", FIELD(data.mask_eod_loss), value(false),
              "no loss on targets that are the EOD token; the mean loss is over the other targets of the global "
              "batch"),
      text("data.cache_dir", FIELD(data.cache_dir), "next to each dataset",
           "directory for the cached sample indexes (for datasets on read-only storage); when set it must be a "
           "writable directory (else exit 2 at start-up); the default falls back to an index in memory, with a "
           "warning, where the data's directory is read-only"),
      section("data.synthetic", "seeded Markov source (below)"),
      integer("data.synthetic.vocab", FIELD(data.syn.vocab), 2, 1 << 30,
              derived("`model.vocab`", [](const Recipe& r) { return r.model.vocab; }),
              "tokens the source emits; `<= model.vocab`"),
      integer("data.synthetic.order", FIELD(data.syn.order), 1, 8, value<int64_t>(2), "context length of the chain"),
      integer("data.synthetic.branching", FIELD(data.syn.branching), 1, 1024, value<int64_t>(4),
              "successors per context"),
      real("data.synthetic.skew", FIELD(data.syn.skew), 0, 100, Open::none, value<double>(0.7),
           "successor j has probability proportional to `exp(-skew * j)`"),
      integer("data.synthetic.seed", FIELD(data.syn.seed), 0, kMax, value<int64_t>(1),
              "seed of the chain's transition structure"),
      integer("eval.every", FIELD(eval.every), 0, kMax, value<int64_t>(0),
              "evaluate every N steps (0: only after the last step)"),
      integer("eval.batches", FIELD(eval.batches), 0, kMax, value<int64_t>(8),
              "micro-batches of the valid split per evaluation (0 disables)"),
      text("checkpoint.dir", FIELD(checkpoint.dir), "— (no checkpoints)",
           "directory of checkpoints: `step_NNNNNNNN/` per saved step and a `latest` pointer"),
      integer("checkpoint.every", FIELD(checkpoint.every), 0, kMax, value<int64_t>(0),
              "save after every N steps (0: only after the last step); with a `dir`, the last step is always saved"),
      integer("checkpoint.keep", FIELD(checkpoint.keep), 1, kMax, value<int64_t>(3),
              "complete checkpoints kept; older ones are removed after a new one is complete"),
      boolean("checkpoint.async", FIELD(checkpoint.async), value<bool>(true),
              "write the files from a background thread (the step pays only a copy to host buffers of 12 bytes per "
              "element of the rank's shard, kept for the run); `false`: write inside the step"),
      integer("log.every", FIELD(log.every), 1, kMax, value<int64_t>(10),
              "stdout line every N steps (and the first and last)"),
      real("log.straggler", FIELD(log.straggler), 0, 1e6, Open::none, value<double>(0.1),
           "on a progress line, name the slowest rank when its busy time (the step less its waits for other ranks: "
           "data-parallel reductions, pipeline transfers, tensor-parallel collectives) exceeds the median rank's by "
           "more than this fraction ([metrics.md](metrics.md#the-progress-line))"),
      text("log.metrics", FIELD(log.metrics), "—",
           "JSON-lines metrics file ([metrics.md](metrics.md)); missing directories are created"),
      text("log.tensorboard", FIELD(log.tensorboard), "none",
           "directory for TensorBoard event files (rank 0): every number of the metrics records as a scalar "
           "tagged `train/loss`, `train/peak_bytes/activations`, `eval/val_loss`, ..., and the resolved recipe as "
           "text; a resumed run adds a file and TensorBoard joins them by step ([metrics.md](metrics.md#tensorboard))"),
      real("log.peak_flops", FIELD(log.peak_flops), 0, 1e20, Open::none, value<double>(0.0),
           "FLOP/s per rank that MFU is relative to; 0 = the GPU's dense peak, or on CPU this machine's sgemm peak "
           "for the run's thread count, measured once and cached ([metrics.md](metrics.md#the-mfu-reference))"),
      text("log.trace", FIELD(log.trace), "none",
           "write a Chrome trace (JSON; open in Perfetto or `chrome://tracing`): one track per rank, spans for "
           "forward, backward (or input / weight passes), pipeline sends (copy and post) and time waiting on pipeline "
           "receives, gradient sync (data, embedding and replicated-parameter reductions), the optimizer step, and "
           "with `parallel.expert > 1` each MoE layer's `expert dispatch` and `expert combine` (issue to completion) "
           "with the part spent `expert (waiting)`; its `otherData` holds each traced step's measured pipeline "
           "`bubble` per "
           "stage and the simulator's `bubble_predicted`"),
      integers("log.trace_steps", FIELD(log.trace_steps), 1, kMax, "`[2]`",
               "steps (1-based) written to `log.trace`; the file is written after the last of them"),
      text("log.flight_recorder", FIELD(log.flight_recorder),
           "`checkpoint.dir/flight_recorder`, else `/tmp/trident-flight-PID` (rank 0's PID)",
           "directory where, on a timeout (`parallel.timeout_s`), each rank writes its last 1024 communication "
           "operations (`rank_R.json`) and reads the other ranks' to name the one that is behind ([slurm.md]"
           "(slurm.md#when-something-goes-wrong)); on several nodes it must be on a shared file system"),
      integer("seed", FIELD(seed), 0, kMax, value<int64_t>(1234),
              "seeds initialisation (Philox keyed by parameter name) and data sampling"),
      choice<DeviceType>("device", FIELD(device), value<DeviceType>(DeviceType::cpu),
                         "compute device; `cuda`: each rank binds to GPU `local_rank % devices`, NCCL for every group "
                         "with one GPU per rank, host staging over MPI when ranks share a GPU ([cuda.md](cuda.md)); "
                         "refused (exit 2) by a build without CUDA or where no GPU is visible"),
  };
  return keys;
}

}  // namespace

const std::vector<Key>& keys() { return table(); }

}  // namespace trident::recipe_detail

namespace trident {

const std::vector<RecipeKey>& recipe_keys() {
  static const std::vector<RecipeKey> docs = [] {
    std::vector<RecipeKey> out;
    for (const auto& k : recipe_detail::keys()) out.push_back(k.doc);
    return out;
  }();
  return docs;
}

std::vector<std::pair<std::string, std::string>> recipe_values(const Recipe& r, const std::string& section) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : recipe_detail::keys())
    if (k.show && k.doc.path.starts_with(section + ".")) out.emplace_back(k.doc.path, k.show(r));
  return out;
}

std::string recipe_section(const std::string& path) {
  const auto dot = path.find('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string recipe_keys_markdown(const std::string& section) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : recipe_keys())
    if (recipe_section(k.path) == section)
      out += fmt::format("| `{}` | {} | {} | {} |\n", k.path, k.type, k.default_text, k.doc);
  return out;
}

std::string recipe_doc_with_tables(const std::string& doc) {
  std::istringstream in(doc);
  std::string out, line, section;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      const auto a = line.find('`'), b = line.rfind('`');
      section = a != std::string::npos && b > a ? line.substr(a + 1, b - a - 1) : "";
    }
    if (line.rfind("| key | type | default | meaning |", 0) == 0) {
      out += recipe_keys_markdown(section);
      in_table = true;
      continue;
    }
    if (in_table && line.rfind("|", 0) == 0) continue;
    in_table = false;
    out += line + "\n";
  }
  return out;
}

}  // namespace trident
