// The model.* recipe keys (the first part of core/recipe/keys.cpp's
// table, in the loader's order): architecture, sizes, rotary scaling,
// attention, MoE, MLA, MTP.
#include "core/recipe/key_builders.hpp"

namespace trident::recipe_detail {

namespace {

int64_t default_ffn_hidden(const Recipe& r) {
  const int64_t C = r.model.hidden;
  return r.model.arch == Arch::gpt2 ? 4 * C : (8 * C / 3 + 63) / 64 * 64;
}

}  // namespace

std::vector<Key> model_keys() {
  return {
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
           "clamped_swiglu's clamp (transformers' `swiglu_limit`)")};
}

}  // namespace trident::recipe_detail
