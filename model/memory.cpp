// Activation memory formulas (see memory.hpp), mirroring make_activations.
#include "model/memory.hpp"

#include <algorithm>

#include "kernels/attention.hpp"
#include "model/architecture.hpp"
#include "model/attention.hpp"

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

int64_t moe_layer_elements(const ModelConfig& cfg, const ActivationShape& s) {
  const MoeConfig& e = cfg.moe;
  if (!e.enabled) return 0;
  const int64_t N = s.micro_batch * cfg.seq_len / s.context, M = N * e.top_k, C = cfg.hidden;
  const int64_t I = e.ffn_hidden / s.tensor, S = e.shared_width() / s.tensor;
  int64_t n = 2 * N * e.experts + M + 3 * M + M * 2 * I + M * I + M * C;
  if (s.expert > 1) n += M * C;  // the received rows themselves (model/moe.cpp: x_in before fc_in and act_in)
  if (S > 0) n += N * 2 * S + N * S + (e.shared_expert_gate ? N * C + N : 0);
  return n;
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

int64_t shared_recompute_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers,
                                  int64_t moe_layers) {
  if (layers == 0 || s.recompute == Recompute::none) return 0;
  const ActivationSizes z = activation_sizes(cfg, s);
  if (s.recompute == Recompute::selective) return z.attention_state;
  // each MoE layer's buffers; the rows its experts receive one layer at a time (freed after each)
  // (under expert parallelism their input, gate|up and activation: moe_layer_elements' M (C + 3 I))
  const int64_t M = s.micro_batch * cfg.seq_len / s.context * cfg.moe.top_k;
  const int64_t received = s.expert > 1 ? M * (cfg.hidden + 3 * (cfg.moe.ffn_hidden / s.tensor)) : 0;
  const int64_t moe = moe_layers > 0 ? moe_layers * (moe_layer_elements(cfg, s) - received) + received : 0;
  return layer_set_elements(z) + z.attention_state + moe;
}

int64_t scratch_elements(const ModelConfig& cfg, const ActivationShape& s) {
  const ActivationSizes z = activation_sizes(cfg, s);
  int64_t n = 0;
  for (int64_t b : workspace_sizes(z)) n += b;
  // the attention variant's (model/attention.hpp)
  n += attention_layout(cfg, local_dims(cfg, {0, s.tensor}), z.N).scratch_total();
  if (cfg.mtp.depth > 0) n += 6 * z.R * z.C;  // multi-token prediction's backward (model/mtp.cpp)
  const MoeConfig& e = cfg.moe;
  if (e.enabled) {  // MoeMlp's: gathered rows and their gradients, router gradients, the shared experts'
    const int64_t N = z.N, M = N * e.top_k, C = z.C, I = e.ffn_hidden / s.tensor, S = e.shared_width() / s.tensor;
    n += M * C + std::max(M, N) * C + M * C + M * 2 * I + M * I + 2 * N * e.experts + (M + N) + 2 * N * C + N * 2 * S +
         N * S;
  }
  return (s.paired_passes ? 2 : 1) * n;  // a pair's second pass has a workspace of its own
}

}  // namespace trident::model
