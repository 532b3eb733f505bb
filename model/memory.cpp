// Activation memory formulas (see memory.hpp), mirroring make_activations.
#include "model/memory.hpp"

namespace trident::model {

namespace {

struct Sizes {
  int64_t N, R, C, qkv, atty, fc, ffn, vocab, probs, norm_full;
};

Sizes sizes(const ModelConfig& cfg, const ActivationShape& s) {
  const LocalDims d = local_dims(cfg, {0, s.tensor});
  Sizes z;
  z.N = s.micro_batch * cfg.seq_len;
  z.C = cfg.hidden;
  const bool gathers = s.sequence_parallel && s.tensor > 1;
  z.R = gathers ? z.N / s.tensor : z.N;
  z.qkv = (d.heads + 2 * d.kv_heads) * cfg.head_dim();
  z.atty = d.heads * cfg.head_dim();
  z.fc = cfg.arch == "llama" ? 2 * d.ffn : d.ffn;
  z.ffn = d.ffn;
  z.vocab = d.vocab;
  z.probs = s.micro_batch * d.heads * cfg.seq_len * cfg.seq_len;
  z.norm_full = gathers ? z.N * z.C : z.R * z.C;  // a norm's output, gathered to all rows when sequence parallel
  return z;
}

}  // namespace

int64_t activation_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers, bool head) {
  const Sizes z = sizes(cfg, s);
  const int64_t layer_set_no_probs =
      2 * z.norm_full + 4 * z.R + z.N * z.qkv + z.N * z.atty + z.R * z.C + z.N * z.fc + z.N * z.ffn;
  int64_t n = 0;
  if (layers > 0 && s.recompute != Recompute::full)
    n += layers * (layer_set_no_probs + (s.recompute == Recompute::none ? z.probs : 0));
  n += layers * z.R * z.C;  // each layer's input
  if (s.split_backward) n += layers * (z.N * z.qkv + z.N * z.C + z.N * z.fc + z.N * z.C);
  n += z.R * z.C;  // the chunk's output
  if (head) n += z.norm_full + 2 * z.R + z.N * z.vocab + z.N;
  return n;
}

int64_t shared_recompute_elements(const ModelConfig& cfg, const ActivationShape& s, int64_t layers) {
  if (layers == 0 || s.recompute == Recompute::none) return 0;
  const Sizes z = sizes(cfg, s);
  if (s.recompute == Recompute::selective) return z.probs;
  return 2 * z.norm_full + 4 * z.R + z.N * z.qkv + z.N * z.atty + z.R * z.C + z.N * z.fc + z.N * z.ffn + z.probs;
}

int64_t scratch_elements(const ModelConfig& cfg, const ActivationShape& s) {
  const Sizes z = sizes(cfg, s);
  return 3 * z.N * z.C + 3 * z.R * z.C + z.N * z.qkv + z.N * z.atty + z.N * z.fc + z.N * z.ffn;
}

}  // namespace trident::model
