// Activation memory formulas (see memory.hpp), mirroring make_activations.
#include "model/memory.hpp"

#include <algorithm>

#include "kernels/attention.hpp"
#include "model/architecture.hpp"
#include "model/attention.hpp"
#include "model/fp8_linear.hpp"
#include "model/mtp.hpp"

namespace trident::model {

ActivationSizes activation_sizes(const ModelConfig& cfg, const ActivationShape& s) {
  const LocalDims d = local_dims(cfg, {0, s.tensor});
  const bool gathers = s.sequence_parallel && s.tensor > 1;
  ActivationSizes z;
  z.N = s.micro_batch * cfg.seq_len / s.context;
  z.C = cfg.hidden;
  z.R = gathers ? z.N / s.tensor : z.N;
  z.norm_full = gathers ? z.N * z.C : z.R * z.C;  // gathered to all rows when sequence parallel
  z.stats = z.R;
  z.qkv = z.N * kernels::attention_qkv_width(d.heads, d.kv_heads, cfg.q_head_dim(), cfg.v_head_dim());
  z.atty = z.N * d.heads * cfg.v_head_dim();
  z.fc = z.N * architecture(cfg.arch).mlp_in_width(d.ffn);
  z.act = z.N * d.ffn;
  z.attention_state = kernels::attention_state_elements(s.micro_batch, cfg.seq_len / s.context, d.heads);
  z.logits = z.N * d.vocab;
  z.losses = z.N;
  return z;
}

std::array<int64_t, 10> workspace_sizes(const ActivationSizes& z) {
  const int64_t NC = z.N * z.C, RC = z.R * z.C;
  return {NC, RC, RC, NC, NC, RC, z.qkv, z.atty, z.fc, z.act};
}

namespace {
// One layer's buffers without the attention state: two norm outputs and
// their statistics, qkv, attention output, x_mid, the MLP's two.
int64_t layer_set_elements(const ActivationSizes& z) {
  return 2 * z.norm_full + 4 * z.stats + z.qkv + z.atty + z.R * z.C + z.fc + z.act;
}
}  // namespace

namespace {
// one MoE layer's buffers at this shape (model/moe.hpp)
MoeLayout moe_layout_of(const ModelConfig& cfg, const ActivationShape& s) {
  const int64_t N = s.micro_batch * cfg.seq_len / s.context;
  return moe_layout(cfg.moe, N, cfg.hidden, cfg.moe.ffn_hidden / s.tensor, cfg.moe.shared_width() / s.tensor,
                    s.expert > 1);
}
}  // namespace

int64_t moe_layer_elements(const ModelConfig& cfg, const ActivationShape& s) {
  return cfg.moe.enabled ? moe_layout_of(cfg, s).kept() : 0;
}

int64_t moe_layers_in(const ModelConfig& cfg, int64_t first, int64_t layers) {
  int64_t n = 0;
  for (int64_t l = first; l < first + layers; ++l) n += cfg.moe.is_moe(l);
  return n;
}

int64_t activation_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers, bool head,
                            int64_t moe_layers) {
  const ActivationSizes z = activation_sizes(cfg, s);
  const int64_t depth = head ? cfg.mtp.depth : 0;  // multi-token prediction: a block per depth, and its own buffers
  layers += depth, moe_layers += moe_layers_in(cfg, cfg.layers, depth);
  // full recompute: the MoE layers' buffers are the chunk's shared set (shared_recompute_elements)
  int64_t n = s.recompute == Recompute::full ? 0 : moe_layers * moe_layer_elements(cfg, s);
  // the attention variant's own buffers per layer (model/attention.hpp: QK-norm's heads, MLA's latents)
  n += layers * attention_layout(cfg, local_dims(cfg, {0, s.tensor}), z.N).saved_total();
  if (layers > 0 && s.recompute != Recompute::full)
    n += layers * (layer_set_elements(z) + (s.recompute == Recompute::none ? z.attention_state : 0));
  n += layers * z.R * z.C;  // each layer's input
  if (s.split_backward) n += layers * (z.qkv + z.N * z.C + z.fc + z.N * z.C);
  n += z.R * z.C;  // the chunk's output
  if (head) n += z.norm_full + 2 * z.stats + z.logits + z.losses;
  // each depth's embedding rows, norms, eh_proj input, block output, head norm, logits, losses, d_emb
  n += depth * (7 * z.R * z.C + 3 * z.stats + z.norm_full + z.logits + z.losses);
  return n;
}

int64_t fp8_kept_values(const ModelConfig& cfg, const Fp8Config& f, const ActivationShape& s, int64_t first,
                        int64_t layers, bool head) {
  if (s.recompute == Recompute::full) return 0;
  const ActivationSizes z = activation_sizes(cfg, s);
  const int64_t sizes[3] = {z.norm_full, z.norm_full, z.act};  // ln1_full, ln2_full, act
  int64_t n = 0;
  auto add = [&](int64_t g) {
    const std::array<bool, 3> kept = fp8_kept_inputs(cfg, f, g);
    for (int j = 0; j < 3; ++j) n += kept[size_t(j)] ? sizes[j] : 0;
  };
  for (int64_t g = first; g < first + layers; ++g) add(g);
  for (int64_t k = 0; head && k < cfg.mtp.depth; ++k) add(cfg.layers + k);
  return n;
}

int64_t shared_recompute_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers,
                                  int64_t moe_layers) {
  if (layers == 0 || s.recompute == Recompute::none) return 0;
  const ActivationSizes z = activation_sizes(cfg, s);
  if (s.recompute == Recompute::selective) return z.attention_state;
  // each MoE layer's buffers; the rows its experts receive one layer at a time (freed after each)
  const int64_t received = cfg.moe.enabled ? moe_layout_of(cfg, s).received : 0;
  const int64_t moe = moe_layers > 0 ? moe_layers * (moe_layer_elements(cfg, s) - received) + received : 0;
  return layer_set_elements(z) + z.attention_state + moe;
}

int64_t scratch_elements(const ModelConfig& cfg, const ActivationShape& s) {
  const ActivationSizes z = activation_sizes(cfg, s);
  int64_t n = 0;
  for (int64_t b : workspace_sizes(z)) n += b;
  // the attention variant's (model/attention.hpp)
  n += attention_layout(cfg, local_dims(cfg, {0, s.tensor}), z.N).scratch_total();
  if (cfg.mtp.depth > 0) n += Mtp<float>::scratch_elements(z.R, z.C);  // multi-token prediction's backward
  if (cfg.moe.enabled) n += moe_layout_of(cfg, s).scratch_total();     // MoeMlp's (model/moe.hpp)
  return (s.paired_passes ? 2 : 1) * n;  // a pair's second pass has a workspace of its own
}

}  // namespace trident::model
