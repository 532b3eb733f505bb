// Recipe: the typed, validated form of a YAML training recipe.
// load_recipe() is strict: unknown keys, wrong types, out-of-range values,
// missing required keys and inconsistent values are InputErrors that name
// file:line:column (or the --set override), the key path, what was expected
// and what was found. Every key and default is documented in docs/recipes.md
// (generated from the key table, core/recipe/keys.cpp; a test keeps it so).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/enums.hpp"

namespace trident {

// model.moe (docs/moe.md): mixture-of-experts MLPs on the layers it selects.
struct MoeConfig {
  bool enabled = false;  // the recipe has a model.moe section
  int64_t experts = 0, top_k = 0;
  int64_t ffn_hidden = 0;             // I: each routed expert's SwiGLU width
  int64_t shared_experts = 0;         // always-on experts, run as one SwiGLU MLP of shared_experts x shared_ffn_hidden
  int64_t shared_ffn_hidden = 0;      // each shared expert's width
  bool shared_expert_gate = false;    // Qwen2-MoE: the shared output times sigmoid(x . w_g), w_g [1, hidden]
  int64_t first_dense = 0;            // layers [0, first_dense) are dense (first_k_dense_replace)
  int64_t every = 1;                  // layer l is MoE when (l + 1) % every == 0 (decoder_sparse_step)
  std::vector<int64_t> dense_layers;  // and not listed here (mlp_only_layers)
  RouterScore score = RouterScore::softmax;
  bool norm_topk = true;
  int64_t groups = 1, group_topk = 1;
  double scaling = 1.0;
  Balance balance = Balance::aux_loss;
  double balance_coef = 0.01, z_loss = 0.0, bias_rate = 0.0;
  double capacity_factor = 0.0;  // 0: dropless
  // gpt-oss: a learned bias on the router's logits (mlp.router.bias),
  // biases on each expert's gate|up and down projections, the clamped SwiGLU
  bool router_bias = false, expert_bias = false;
  MoeActivation activation = MoeActivation::swiglu;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
  // Whether global layer l has the MoE MLP (false for every layer without model.moe).
  bool is_moe(int64_t layer) const {
    if (!enabled || layer < first_dense || (layer + 1) % every != 0) return false;
    for (int64_t d : dense_layers)
      if (d == layer) return false;
    return true;
  }
  int64_t shared_width() const { return shared_experts * shared_ffn_hidden; }
  // The per-expert correction bias (e_score_correction_bias): with sigmoid
  // scores (as DeepSeek-V3 and GLM-4-MoE hold it) or aux-loss-free balancing.
  bool has_bias() const { return score == RouterScore::sigmoid || bias_rate > 0; }
};

// model.mla (docs/mla.md): multi-head latent attention's sizes. Queries
// through a rank-q_lora_rank latent (0: one projection), keys and values
// through a rank-kv_lora_rank latent; each query and key head is a
// qk_nope_head_dim part without positions and a qk_rope_head_dim rotary part
// (the key's shared by all heads); values have v_head_dim per head.
struct MlaConfig {
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// model.mtp (docs/mtp.md): DeepSeek-V3's multi-token prediction. `depth`
// sequential modules on the last pipeline stage; module k predicts the
// token k + 1 positions ahead from the previous depth's hidden state and
// the embedding of the token k positions ahead, through a transformer block
// of its own (layer index layers + k - 1), the shared embedding and head.
// Their losses' mean over depths, times loss_weight, joins the training loss.
struct MtpConfig {
  int64_t depth = 0;  // 0: none
  double loss_weight = 0.3;
};

// model.rope_scaling (docs/recipes.md): the rotary frequencies as
// transformers' rope_parameters compute them. linear: every frequency /
// factor; llama3 (Llama 3.1-3.3): wavelengths past original_seq_len /
// low_freq_factor divided by factor, those under original_seq_len /
// high_freq_factor kept, a smooth blend between; yarn (YaRN: DeepSeek-V3,
// gpt-oss, Qwen long context): a ramp between interpolated and extrapolated
// frequencies over the dimensions whose rotations at original_seq_len lie
// between beta_slow and beta_fast (floor/ceil with truncate), cos and sin
// scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim) (or
// mscale(factor) without both), mscale(s, m) = 0.1 m ln s + 1; multi-head
// latent attention's softmax scale also times mscale(factor, mscale_all_dim)^2.
struct RopeScaling {
  RopeType type = RopeType::none;
  double factor = 1.0;
  int64_t original_seq_len = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double beta_fast = 32.0, beta_slow = 1.0, mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
};

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, seq_len = 0, vocab = 0;
  int64_t head_size = 0;  // model.head_dim: each head's size D (0: hidden / heads)
  double rope_theta = 10000.0, norm_eps = 1e-5, init_std = 0.02;
  RopeScaling rope_scaling;
  bool tie_embeddings = true;
  bool qk_norm = false;         // RMSNorm of each query and key head before rotary (Qwen3), weights [head_dim]
  bool attention_bias = false;  // biases on the q, k and v projections (Qwen2; llama)
  bool o_bias = false;          // a bias on the output projection o_proj (gpt-oss, Llama's attention_bias; llama)
  // Sliding-window attention: in the layers layer_types marks sliding (all
  // of them when it is empty), query t sees keys s with t - s < sliding_window.
  int64_t sliding_window = 0;  // 0: none
  std::vector<LayerAttention> layer_types;
  bool attention_sinks = false;  // one learned logit per head in each softmax denominator (gpt-oss)
  int64_t vocab_multiple = 64;   // the vocabulary is padded to a multiple of vocab_multiple x tensor
  MoeConfig moe;
  AttentionKind attention = AttentionKind::standard;
  MlaConfig mla;  // attention: mla
  MtpConfig mtp;
  bool is_mla() const { return attention == AttentionKind::mla; }
  int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  // Global layer `layer`'s attention window (0: the whole causal past). The
  // multi-token prediction modules' blocks (layer >= layers) attend fully.
  int64_t window(int64_t layer) const {
    if (sliding_window <= 0 || layer >= layers) return 0;
    if (layer_types.empty()) return sliding_window;
    return layer_types[size_t(layer)] == LayerAttention::sliding ? sliding_window : 0;
  }
  // A query (and key) head's size, and a value head's: head_dim, or MLA's.
  int64_t q_head_dim() const { return is_mla() ? mla.qk_head_dim() : head_dim(); }
  int64_t v_head_dim() const { return is_mla() ? mla.v_head_dim : head_dim(); }
  // Rows of the token table and LM head with `tensor` ranks: vocab rounded up
  // to a multiple of vocab_multiple x tensor. Padded rows never win nor take
  // probability (their logits are masked) and are stripped on export.
  int64_t padded_vocab(int64_t tensor) const {
    const int64_t m = vocab_multiple * tensor;
    return (vocab + m - 1) / m * m;
  }
};

struct ParallelConfig {
  int64_t data = 1, tensor = 1, pipeline = 1;  // 0 = auto (at most one of them; data unless given)
  std::string inferred;                        // the axis `auto` resolved ("data", ...), "" when none
  int64_t context = 1;                         // sequence split (context parallelism)
  int64_t expert = 1;                          // expert parallelism: the expert group, carved out of data x context
  int64_t expert_tensor = 0;                   // each expert's FFN split; 0: = tensor
  int64_t expert_tensor_size() const { return expert_tensor > 0 ? expert_tensor : tensor; }
  // expert_tensor 1 < tensor: each expert whole on one rank (not split over the tensor group)
  bool whole_experts() const { return expert_tensor_size() == 1 && tensor > 1; }
  ContextMode context_mode = ContextMode::ring;
  std::vector<MeshAxis> order{MeshAxis::tensor, MeshAxis::data, MeshAxis::pipeline};  // innermost first; context
                                                                                      // inside data unless named
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int64_t virtual_stages = 1;
  int64_t zero = 0;
  // HSDP: ZeRO shards within groups of data_shard ranks of data x context,
  // replicated over data_replicate of them (0: derived; both 0: one group).
  int64_t data_shard = 0, data_replicate = 0;
  int64_t data_shard_size() const {
    return data_shard > 0 ? data_shard : data_replicate > 0 ? data * context / data_replicate : data * context;
  }
  int64_t data_replicate_size() const { return data * context / std::max<int64_t>(1, data_shard_size()); }
  bool hsdp() const { return data_replicate_size() > 1; }
  ZeroAccumulate zero_accumulate = ZeroAccumulate::full;
  bool sequence_parallel = false;
  bool overlap_paired = true;  // dualpipev: paired passes overlap their expert exchanges
  int64_t bucket_bytes = 25 << 20;
  std::vector<int64_t> stage_layers;  // layers per pipeline chunk (P x V entries); empty: even split
  double timeout_s = 600;             // a pipeline transfer waiting longer is an error
};

// train.fp8 (docs/precision.md#fp8-training): the linears' GEMMs on FP8
// operands, emulated where the hardware has no FP8 GEMM.
struct Fp8Config {
  Fp8Recipe recipe = Fp8Recipe::none;
  Fp8Format format = Fp8Format::e4m3;
  int64_t amax_history = 1024;  // delayed: steps of amax kept (Transformer Engine's amax_history_len)
  double margin = 0;            // delayed: scale = max_fp8 / amax / 2^margin
  bool power_of_two = false;    // scales rounded to powers of two (blockwise: DeepSeek's ue8m0)
  // module kinds kept in the high precision besides those that always are
  // (embedding, LM head, router, norms: never FP8 GEMMs)
  std::vector<Fp8Module> keep_high_precision{Fp8Module::embedding, Fp8Module::lm_head, Fp8Module::router,
                                             Fp8Module::norm};
  bool param_gather = false;  // ZeRO 3 all-gathers FP8 weights (tensorwise, delayed)
  // the inputs only a weight gradient reads (the norms' outputs before the
  // attention's and the MLP's first linear, the MLP's second input) kept as
  // the FP8 codes the forward GEMM read (tensorwise, delayed; precision bf16)
  bool saved_inputs = false;
  bool on() const { return recipe != Fp8Recipe::none; }
  bool keeps(Fp8Module m) const {
    for (Fp8Module k : keep_high_precision)
      if (k == m) return true;
    return false;
  }
};

struct TrainConfig {
  int64_t global_batch = 0, micro_batch = 0, steps = 0;
  Precision precision = Precision::fp32;  // bf16 / fp16: mixed precision, fp32 master weights
  // fp16's dynamic loss scaling: the initial scale; it halves on a step with
  // inf/NaN gradients (the step is skipped) and doubles after
  // loss_scale_window clean steps; never below min_loss_scale.
  double loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  double min_loss_scale = 1.0;
  Recompute recompute = Recompute::none;
  // a non-finite loss or gradient norm (fp16: a non-finite loss; its
  // gradient overflows are the loss scaler's): stop before the update, or
  // skip the update, stopping after nonfinite_limit in a row
  NonFinite nonfinite = NonFinite::stop;
  int64_t nonfinite_limit = 5;
  int64_t threads = 0;  // 0 = all cores of this process's share
  Fp8Config fp8;
};

// optim.muon (docs/optim.md#muon): torch.optim.Muon for the hidden
// matrices, AdamW (the optim keys above it) for the rest.
struct MuonConfig {
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
  MuonAdjustLr adjust_lr = MuonAdjustLr::original;
  MuonPrecision ns_precision = MuonPrecision::bf16;
  double weight_decay = 0.0;
  int64_t rounds = 4;  // the exchanges over the tensor group go in this many rounds (1: no overlap)
  // QK-clip (docs/optim.md#qk-clip)
  struct QkClip {
    bool on = false;
    double threshold = 100.0;
  } qk_clip;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::adamw;
  MuonConfig muon;
  double lr = 0, min_lr = 0;
  int64_t warmup = 0;
  LrDecay decay = LrDecay::cosine;
  double wsd_decay_fraction = 0.2;
  std::array<double, 2> betas{0.9, 0.95};
  double eps = 1e-8, weight_decay = 0.0, grad_clip = 1.0;
  bool decay_norms_and_biases = false, decay_embeddings = false;
};

struct SyntheticConfig {
  int64_t vocab = 0, order = 2, branching = 4;
  double skew = 0.7;
  int64_t seed = 1;
};

// One indexed dataset of a split (PREFIX.bin / PREFIX.idx) and its share.
struct DataSource {
  std::string path;
  double weight = 1;
};

struct DataConfig {
  bool synthetic = true;
  SyntheticConfig syn;
  std::vector<DataSource> train, valid;  // one prefix, or a weighted blend
  bool document_mask = false;            // attention and positions stay inside each document
  bool mask_eod_loss = false;            // no loss on targets that are the EOD token
  std::string cache_dir;                 // sample indexes ("": next to each dataset)
};

struct EvalConfig {
  int64_t every = 0;  // 0 = only after the last step
  int64_t batches = 8;
};

struct CheckpointConfig {
  std::string dir;
  int64_t every = 0, keep = 3;
  bool async = true;  // write files from a background thread while training goes on
};

struct LogConfig {
  int64_t every = 10;
  double straggler = 0.1;  // the progress line names the slowest rank when its busy time exceeds the median by this
  std::string metrics;
  std::string tensorboard;           // TensorBoard event files' directory ("" = none)
  double peak_flops = 0;             // 0 = measure this machine's GEMM peak at start-up
  std::string trace;                 // Chrome trace file ("" = none)
  std::vector<int64_t> trace_steps;  // steps traced (1-based; default [2])
  std::string flight_recorder;       // where ranks write their records on a timeout ("": derived)
};

struct Recipe {
  std::string source;                  // file the recipe came from
  std::string text;                    // its YAML text, as read
  std::vector<std::string> overrides;  // the key.path=value overrides applied to it (--set)
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LogConfig log;
  int64_t seed = 1234;
  DeviceType device = DeviceType::cpu;
  std::vector<std::string> keys_read;  // every key path the loader knows, in order

  // The recipe as resolved: its text and --set overrides, '\0'-separated
  // (ranks compare hashes of it; the planner keys its caches by it).
  std::string resolved_text() const {
    std::string key = text;
    for (const auto& o : overrides) key.append(1, '\0').append(o);
    return key;
  }

  int64_t micro_batches_per_step(int64_t data_parallel) const {
    return train.global_batch / (train.micro_batch * data_parallel);
  }
};

// The key table (core/recipe/keys.cpp): every key's path, type and range,
// default and meaning, in the order the loader reads them.
struct RecipeKey {
  std::string path, type, default_text, doc;
};
const std::vector<RecipeKey>& recipe_keys();
// Every key of a section ("model": model.*) with this recipe's typed value
// as YAML reads it back, in the key table's order: what a checkpoint
// records of the model, so that every key, present and future, is compared.
std::vector<std::pair<std::string, std::string>> recipe_values(const Recipe& r, const std::string& section);
// "model" for "model.layers", "" for a top-level key.
std::string recipe_section(const std::string& path);
// The markdown table of one section's keys, as docs/recipes.md shows it.
std::string recipe_keys_markdown(const std::string& section);
// A reference page (docs/recipes.md) with every key table regenerated: a
// table starts at its header row and belongs to the section of the "## `name`"
// heading above it ("## Top level": the top-level keys).
std::string recipe_doc_with_tables(const std::string& doc);

// Loads and validates a recipe; overrides are "key.path=value" (YAML scalar or
// flow value). `world` is the number of processes the run has.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {}, int64_t world = 1);
// The fewest ranks the recipe's mesh asks for (data x tensor x pipeline x
// context, with the overrides; an `auto` or absent size counts 1), without
// validating the rest; 0 when a size is invalid.
int64_t recipe_ranks(const std::string& path, const std::vector<std::string>& overrides = {});
Recipe load_recipe_text(const std::string& yaml_text, const std::string& name,
                        const std::vector<std::string>& overrides = {}, int64_t world = 1);
// The planner's and the sweep's recipe: read and checked like load_recipe's
// except for its mesh (parallel.data, tensor, pipeline, context and what
// depends on them), which the caller sets in the typed recipe and checks
// with validate_on_mesh. (Its text and overrides stay the file's record.)
Recipe load_recipe_unplaced(const std::string& path, const std::vector<std::string>& overrides = {});
// The loader's mesh-dependent checks (and the rest) of a typed recipe on
// `world` ranks: InputError "FILE: key 'K': ..." with the arithmetic.
void validate_on_mesh(Recipe& rc, int64_t world);
// A recipe on one process (a 1x1x1x1 mesh, ZeRO 0, 1F1B, no sequence
// parallelism, an even split), set in the typed recipe and checked with
// validate_on_mesh: export, import, sampling, calibration, the resume
// report and the tests' single-rank references. The *_on_one_process loaders
// read the recipe unplaced (load_recipe_unplaced) and place it so.
void place_on_one_process(Recipe& rc);
Recipe load_recipe_on_one_process(const std::string& path, const std::vector<std::string>& overrides = {});
// The same for a recipe read for its model alone (`trident import`): the
// training keys it does not use may be absent; each required one that is
// gets a placeholder override (train.global_batch=1, ...), kept in
// `overrides` so that the recipe reloads as it was read.
Recipe load_model_recipe_on_one_process(const std::string& path, const std::vector<std::string>& overrides = {});
Recipe load_recipe_text_on_one_process(const std::string& yaml_text, const std::string& name,
                                       const std::vector<std::string>& overrides = {});

}  // namespace trident
