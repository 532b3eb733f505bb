// The per-operation step-time model (see step_model.hpp and docs/planner.md).
#include "launch/plan/step_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "model/architecture.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"

namespace trident::launch {

double DeviceRates::gemm_efficiency(double dim) const {
  if (gemm_table.empty()) return gemm_fraction;
  if (dim <= gemm_table.front().first) return gemm_table.front().second;
  if (dim >= gemm_table.back().first) return gemm_table.back().second;
  for (size_t i = 1; i < gemm_table.size(); ++i) {
    const auto& [d1, f1] = gemm_table[i];
    if (dim > d1) continue;
    const auto& [d0, f0] = gemm_table[i - 1];
    const double t = (std::log2(dim) - std::log2(d0)) / (std::log2(d1) - std::log2(d0));
    return f0 + t * (f1 - f0);
  }
  return gemm_table.back().second;
}

namespace {

// A GEMM [m, k] x [k, n] (batch of them): the slower of its FLOPs at the
// shape's efficiency and its operands through memory. Backward: the input
// and weight gradients, each the forward's size.
// linear: the module kind of a linear layer's GEMM (none: the router, the
// head, attention's own GEMMs), for FP8 planned from the recipe.
Op gemm(const std::string& name, int64_t m, int64_t n, int64_t k, int64_t batch, const DeviceRates& r,
        std::optional<Fp8Module> linear = std::nullopt) {
  Op op;
  op.name = name, op.kind = OpKind::gemm, op.m = m, op.n = n, op.k = k, op.batch = batch;
  op.flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  op.bytes =
      double(batch) * (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) * r.bytes_per_value;
  op.efficiency = r.gemm_efficiency(double(std::min({m, n, k})));
  const bool fp8 = !r.fp8_linears_only || (linear && !r.fp8.keeps(*linear));
  const double peak = r.gemm_peak_flops > 0 && fp8 ? r.gemm_peak_flops : r.peak_flops;
  const double one = std::max({op.flops / (peak * op.efficiency), op.bytes / r.memory_bandwidth, r.kernel_floor});
  op.forward_s = one;
  op.backward_s = 2 * one;
  return op;
}

// An elementwise or reduction kernel moving `values` values forward;
// its backward moves `backward_ratio` times as many, in `backward_kernels`.
Op memory(const std::string& name, double values, double backward_ratio, int backward_kernels, const DeviceRates& r) {
  Op op;
  op.name = name, op.kind = OpKind::memory;
  op.bytes = values * r.bytes_per_value;
  op.efficiency = 1;
  op.forward_s = std::max(op.bytes / r.memory_bandwidth, r.kernel_floor);
  op.backward_s = std::max(backward_ratio * op.bytes / r.memory_bandwidth, backward_kernels * r.kernel_floor);
  return op;
}

}  // namespace

std::vector<Op> layer_ops(const ModelConfig& m, const OpShape& shape, const DeviceRates& r) {
  const model::Architecture& arch = model::architecture(m.arch);
  const model::LocalDims local = model::local_dims(m, {0, shape.tensor});
  // s: the sequence; M: this rank's rows (seq_len / context of each sequence)
  const int64_t s = m.seq_len, b = shape.micro_batch, M = b * s / shape.context, C = m.hidden, hd = m.head_dim();
  const int64_t H = local.heads, KV = local.kv_heads, F = local.ffn;
  const double R = double(M) / (shape.sequence_parallel ? shape.tensor : 1);  // rows of the residual stream here
  std::vector<Op> ops;
  // the norm before attention: read the residual, write the normalised rows
  ops.push_back(memory("norm (attention)", 2 * R * double(C), 2, 1, r));
  // the score and value head sizes: hd, or MLA's Dq and Dv
  const int64_t dq = m.q_head_dim(), dv = m.v_head_dim();
  if (m.is_mla()) {  // the latents (on every tensor rank, whole), their norms, the heads' up-projections
    const MlaConfig& a = m.mla;
    const int64_t QL = a.q_lora_rank, KL = a.kv_lora_rank, Dr = a.qk_rope_head_dim;
    if (QL > 0) {
      ops.push_back(gemm("q down", M, QL, C, 1, r, Fp8Module::attention));
      ops.push_back(memory("q latent norm", 2.0 * double(M) * double(QL), 2, 1, r));
      ops.push_back(gemm("q up", M, H * dq, QL, 1, r, Fp8Module::attention));
    } else {
      ops.push_back(gemm("q", M, H * dq, C, 1, r, Fp8Module::attention));
    }
    ops.push_back(gemm("kv down", M, KL + Dr, C, 1, r, Fp8Module::attention));
    ops.push_back(memory("kv latent norm", 2.0 * double(M) * double(KL), 2, 1, r));
    ops.push_back(gemm("kv up", M, H * (a.qk_nope_head_dim + dv), KL, 1, r, Fp8Module::attention));
    ops.push_back(memory("rotary", 2.0 * double(M) * double(H + 1) * double(Dr), 1, 1, r));
  } else {
    ops.push_back(gemm("qkv", M, (H + 2 * KV) * hd, C, 1, r, Fp8Module::attention));
    if (arch.positions == model::Positions::rotary)
      ops.push_back(memory("rotary", 2.0 * double(M) * double(H + KV) * double(hd), 1, 1, r));
  }
  if (r.flash_attention) {
    // causal: about half the score blocks (s^2 / 2 pairs), a sliding window of w the band's s w - w^2 / 2,
    // averaged over the layers (model.layer_types); backward recomputes the scores (5 matmuls to the forward's 2);
    // context parallelism: this rank's rows against the whole sequence (the balanced split gives each an equal share)
    double pairs = 0;
    for (int64_t l = 0; l < m.layers; ++l) {
      const double w = double(m.window(l) > 0 ? std::min(m.window(l), s) : s);
      pairs += double(s) * w - w * w * 0.5;
    }
    pairs /= double(std::max<int64_t>(m.layers, 1));
    Op op;
    op.name = "attention (flash)", op.kind = OpKind::attention;
    // scores over Dq, values over Dv (2 x hd each without MLA)
    op.flops = 2.0 * double(b) * double(H) * pairs * double(dq + dv) / double(shape.context);
    op.bytes = 2.0 * double(M) * double(H) * double(dq + dv) * r.bytes_per_value;
    op.efficiency = r.attention_fraction;
    op.forward_s = std::max(op.flops / (r.peak_flops * op.efficiency), r.kernel_floor);
    op.backward_s = std::max(2.5 * op.flops / (r.peak_flops * op.efficiency), 2 * r.kernel_floor);
    op.recomputed = true;
    ops.push_back(op);
  } else {
    // scores [b H, s, s] = Q K^T, softmax (scale and causal mask fused) and
    // probabilities x V; the scores and probabilities go through memory
    const int64_t q = s / shape.context;  // this rank's query rows
    Op scores = gemm("attention scores", q, s, dq, b * H, r);
    // softmax: read scores, write probabilities (backward: read both gradients' inputs, write one);
    // dropout on them: read, write and a one-byte mask (backward the same)
    const double probs = double(b * H) * double(q) * double(s);
    Op softmax = memory(r.attention_dropout ? "softmax + dropout" : "softmax",
                        probs * (2 + (r.attention_dropout ? 2 + 1 / r.bytes_per_value : 0)),
                        r.attention_dropout ? 1.25 : 1.5, r.attention_dropout ? 2 : 1, r);
    Op values = gemm("attention values", q, dv, s, b * H, r);
    for (Op* op : {&scores, &softmax, &values}) op->kind = OpKind::attention, op->recomputed = true;
    ops.push_back(scores), ops.push_back(softmax), ops.push_back(values);
  }
  ops.push_back(gemm("attention output", M, C, H * dv, 1, r, Fp8Module::attention));
  ops.push_back(memory("residual add (attention)", 3 * R * double(C), 1, 1, r));
  ops.push_back(memory("norm (mlp)", 2 * R * double(C), 2, 1, r));
  const size_t dense_first = ops.size();
  ops.push_back(gemm("mlp in", M, arch.mlp_in_width(F), C, 1, r, Fp8Module::mlp));
  // GELU: read and write [M, F]; SwiGLU: read two halves, write one
  const double act = double(M) * double(F) * (arch.mlp == model::MlpKind::swiglu ? 3 : 2);
  ops.push_back(memory(arch.mlp == model::MlpKind::swiglu ? "swiglu" : "gelu", act, 1.5, 1, r));
  ops.push_back(gemm("mlp out", M, C, F, 1, r, Fp8Module::mlp));
  const MoeConfig& e = m.moe;
  if (e.enabled) {
    for (size_t i = dense_first; i < ops.size(); ++i) ops[i].layers = OpLayers::dense;
    // the router sees every row (after the gather): its GEMM, the scores and routes
    // (whole experts: each tensor rank routes 1 / tensor of the rows to experts of the whole width)
    const int64_t W = shape.whole_experts ? shape.tensor : 1, Mr = M / W;
    const int64_t E = e.experts, K = e.top_k, I = e.ffn_hidden * W / shape.tensor, S = e.shared_width() / shape.tensor;
    // with the experts split, each rank's E / expert experts take every expert rank's rows: as many in all
    const int64_t X = std::max(shape.expert, 1), routed = Mr * K, per = std::max<int64_t>(routed * X / E, 1);
    std::vector<Op> moe = {gemm("router", Mr, E, C, 1, r), memory("routing", 3.0 * double(Mr) * double(E), 1, 1, r),
                           // permute: gather the routed rows; combine: read them weighted, write the tokens
                           memory("permute", 2.0 * double(routed) * double(C), 1, 1, r),
                           gemm("experts in", per, 2 * I, C, E / X, r, Fp8Module::experts),
                           memory("swiglu (experts)", 3.0 * double(routed) * double(I), 1.5, 1, r),
                           gemm("experts out", per, C, I, E / X, r, Fp8Module::experts),
                           memory("combine", double(routed + Mr) * double(C), 1, 1, r)};
    if (S > 0) {
      moe.push_back(gemm("shared experts in", M, 2 * S, C, 1, r, Fp8Module::experts));
      moe.push_back(memory("swiglu (shared)", 3.0 * double(M) * double(S), 1.5, 1, r));
      moe.push_back(gemm("shared experts out", M, C, S, 1, r, Fp8Module::experts));
    }
    for (Op& op : moe) op.layers = OpLayers::moe, ops.push_back(op);
  }
  ops.push_back(memory("residual add (mlp)", 3 * R * double(C), 1, 1, r));
  if (r.fp8_casts && !m.is_mla()) {
    // Transformer Engine's fp8 GEMMs: each input read in bf16 and written in fp8 twice (as is and transposed,
    // for the weight gradient), 4 bytes an element: forward the four GEMMs' inputs (sequence-parallel ones cast
    // on this rank's rows, then gathered), backward their output gradients
    const double qkv = double(M) * double((H + 2 * KV) * hd), in = double(M) * double(arch.mlp_in_width(F));
    const double forward = 2 * R * double(C) + double(M) * double(H * hd) + double(M) * double(F);
    const double backward = qkv + 2 * R * double(C) + in;
    ops.push_back(memory("fp8 casts", 4 / r.bytes_per_value * forward, backward / forward, 4, r));
  }
  // torchtitan's per-op policy (torchtitan/models/llama3 apply_ac, compiled) saves every matmul's output but the
  // second, fourth and sixth of a block (wk, wo, w3), the attention's and the reduce-scatters': the backward
  // needs wk's (the keys) and w3's (SwiGLU's second input) again, not wo's (its reduce-scattered output is kept),
  // and the elementwise ops between (the norms' outputs for the weight gradients, rotary, SwiGLU, the first
  // residual add, the second norm's input); the experts' grouped GEMMs and the all-to-alls are saved (compute-
  // intensive and communication ops), the routing, permutation and combination repeated
  for (Op& op : ops) {
    if (op.kind == OpKind::memory && op.name != "residual add (mlp)" && op.name != "fp8 casts") op.per_op = 1;
    if (op.name == "qkv") op.per_op = double(KV) / double(H + 2 * KV);
    if (op.name == "mlp in" && arch.mlp == model::MlpKind::swiglu) op.per_op = 0.5;
  }
  // the head: final norm, the LM head over this rank's vocabulary rows, cross-entropy
  Op norm = memory("final norm", 2 * R * double(C), 2, 1, r);
  Op logits = gemm("lm head", M, local.vocab, C, 1, r);
  // Trident's fused loss, or the software's own (`software.cross_entropy: fp32`): bytes per logit
  const double scores = double(M) * double(local.vocab);
  Op loss = r.loss_bytes_forward > 0 ? memory("cross-entropy", scores * r.loss_bytes_forward / r.bytes_per_value,
                                              r.loss_bytes_backward / r.loss_bytes_forward, 1, r)
                                     : memory("cross-entropy", 2.0 * scores, 1.5, 1, r);
  for (Op* op : {&norm, &logits, &loss}) op->head = true, ops.push_back(*op);
  return ops;
}

OpTimes stage_op_times(const std::vector<Op>& ops, double dense, double moe, double heads) {
  OpTimes t;
  for (const Op& op : ops) {
    const double layers = op.layers == OpLayers::all ? dense + moe : op.layers == OpLayers::dense ? dense : moe;
    const double times = op.head ? heads : layers;
    if (times == 0) continue;
    const double both = times * (op.forward_s + op.backward_s);
    (op.kind == OpKind::gemm ? t.gemm : op.kind == OpKind::attention ? t.attention : t.memory) += both;
    if (!op.head) t.forward += times * op.forward_s;  // the head is not recomputed
    if (op.recomputed) t.selective += times * op.forward_s;
    t.per_op += times * op.forward_s * op.per_op;
  }
  return t;
}

double muon_seconds(const ModelConfig& m, const MuonConfig& muon, const DeviceRates& rates) {
  std::map<std::pair<int64_t, int64_t>, int64_t> shapes;  // (m, n), m <= n -> how many
  const model::ParamRegistry reg(m);
  for (const auto& x : model::muon_matrices(reg, m, 0, reg.total(), false))
    ++shapes[{std::min(x.rows, x.cols), std::max(x.rows, x.cols)}];
  double s = 0;
  for (const auto& [mn, count] : shapes) {
    const auto [a, b] = mn;
    const double one = gemm("X X^T", a, a, b, 1, rates).forward_s + gemm("A A", a, a, a, 1, rates).forward_s +
                       gemm("B X", a, b, a, 1, rates).forward_s;
    s += double(count) * double(muon.ns_steps) * one;
  }
  return s;
}

int64_t muon_elements(const ModelConfig& m) {
  const model::ParamRegistry reg(m);
  int64_t n = 0;
  for (const auto& x : model::muon_matrices(reg, m, 0, reg.total(), false)) n += x.rows * x.cols;
  return n;
}

}  // namespace trident::launch
