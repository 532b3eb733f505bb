// Bytes per device of one plan, by category (see plan_parts.hpp and
// docs/planner.md: measured against the trainer's per-category peaks).
#include <algorithm>

#include "launch/plan/plan_parts.hpp"
#include "launch/plan/step_model.hpp"
#include "model/memory.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/schedule.hpp"

namespace trident::launch {

namespace {

// Layers the first pipeline rank holds activations for: its chunks' layers x
// their micro-batches in flight (as the schedule's simulation counts them).
double first_stage_layers_in_flight(const PlanContext& x) {
  const auto chunks = model::pipeline_chunks(x.q.model, x.P, x.V, x.c.stage_layers, 0, x.c.schedule);
  double held = 0;
  for (size_t v = 0; v < chunks.size(); ++v) held += double(x.schedule.in_flight[0][v]) * double(chunks[v].layers);
  return held;
}

// The most layer activations the first pipeline rank holds at once (the
// peak over its schedule of the layers of every forward not yet backwarded),
// for uneven splits where the chunks' peaks do not coincide.
double first_stage_layers_live(const PlanContext& x, const PlanResult& r) {
  const auto chunks = model::pipeline_chunks(x.q.model, x.P, x.V, x.c.stage_layers, 0, x.c.schedule);
  double live = 0, peak = 0;
  for (const parallel::Action& a :
       parallel::compute_steps(parallel::make_schedule(x.c.schedule, x.P, x.V, r.micro_batches, 0))) {
    const double layers = double(chunks[size_t(a.chunk)].layers);
    if (a.type == parallel::ActionType::forward) peak = std::max(peak, live += layers);
    if (a.type == parallel::ActionType::backward || a.type == parallel::ActionType::backward_weight) live -= layers;
  }
  return peak;
}

// Megatron-Core's theoretical activation memory of the first pipeline stage
// (megatron/training/theoretical_memory_usage.py, after Korthikanti et al.
// 2022, Table 2), for software that keeps what Megatron-Core keeps
// (`activations: megatron`): per layer s b h (18 + 4 F / h) bytes, all of it
// split over the tensor group with sequence parallelism, s b h (10 + 24 / T)
// without; 2 s b h (split with sequence parallelism) with full
// recomputation (each layer's input), 5 a s^2 b / T more without flash
// attention and recomputation (the scores); the embedding's input (8 s b)
// and dropout mask (s b h) for P micro-batches; the first stage's share of
// the layers in flight: 1F1B min(1, M / P), the interleaved schedule
// 1 + (P - 1) / (P V), the other schedules and uneven splits the simulated count; without a
// pipeline the output layer's input and logits. Megatron counts bf16 bytes;
// fp32 doubles them.
double megatron_activation_bytes(const PlanContext& x, const PlanResult& r) {
  const ModelConfig& m = x.q.model;
  const PlanConfig& c = x.c;
  const double s = double(m.seq_len / x.CP), b = double(c.micro_batch), h = double(m.hidden);
  const double F = double(m.ffn_hidden), L = double(m.layers), P = x.P, V = x.V, T = x.T, M = r.micro_batches;
  const bool sp = c.sequence_parallel && x.T > 1;
  // per layer, on one tensor rank
  double layer = c.recompute == Recompute::full ? 2 * s * b * h / (sp ? T : 1)
                 : sp                           ? s * b * h * (18 + 4 * F / h) / T
                                                : s * b * h * (10 + 24 / T);
  if (c.recompute == Recompute::none && !x.cl.flash_attention) layer += 5 * double(m.heads) * s * s * b / T;
  // fp8 GEMMs (Transformer Engine; not Trident's train.fp8, which keeps them in bf16) keep their inputs for the
  // weight gradients in fp8, half of bf16's bytes:
  // the two norm outputs and the attention projection's input (1 s b h each) and the MLP's second input (F / h)
  // (the norm outputs whole on every tensor rank without sequence parallelism)
  if (x.cl.fp8_saved_inputs && c.recompute != Recompute::full)
    layer -= s * b * h * (2 / (sp ? T : 1) + (1 + F / h) / T);
  double in_flight = 1;  // the first stage's layers in flight, as a fraction of all the layers
  if (x.P > 1) {
    // Megatron's closed forms assume L / (P V) layers in every chunk; an uneven split (parallel.stage_layers:
    // Llama 3's embedding-only first chunk) takes the simulated count of the first stage's layers in flight
    if (!c.stage_layers.empty())
      in_flight = first_stage_layers_live(x, r) / L;
    else if (c.schedule == ScheduleKind::interleaved_1f1b)
      in_flight = 1 + (P - 1) / (P * V);
    else if (c.schedule == ScheduleKind::one_f_one_b)
      in_flight = std::min(1.0, M / P);
    else
      in_flight = first_stage_layers_in_flight(x) / L;
  }
  const double embedding = (8 * s * b + s * b * h) * P / (sp ? T : 1);
  double bytes = (layer * L + embedding) * in_flight;
  const double vocab = double(m.padded_vocab(x.T));
  if (x.P == 1) {
    if (sp)  // the output layer's input and the logits
      bytes += 4 * s * b * h * (1 + vocab / h) / T;
    else  // the logits split over the tensor group, the final norm's output; 5% for temporaries
      bytes = (bytes + 2 * (s * b * vocab / T + s * b * h)) * 1.05;
  }
  return bytes * x.pb / 2;
}

// torchtitan's activation checkpointing (torchtitan/models/llama3's
// apply_ac), for software that keeps what it keeps (`activations:
// torchtitan`), without a pipeline: `full` each block's input; `selective`
// (its per-op policy: every other matmul's output and the attention's saved,
// the rest recomputed from the block's input) the block's input, the query,
// value and attention outputs, the first MLP projection and the second's
// output (after its reduce-scatter); `none` Megatron-Core's formula. The
// loss keeps the logits in bf16 and their fp32 copy. Tensors split over the
// tensor group; the block input and the second projection's output only
// with sequence parallelism.
double torchtitan_activation_bytes(const PlanContext& x, const PlanResult& r) {
  const PlanConfig& c = x.c;
  if (c.recompute == Recompute::none) return megatron_activation_bytes(x, r);
  const ModelConfig& m = x.q.model;
  const double T = x.T, rows = double(c.micro_batch * m.seq_len / x.CP), h = double(m.hidden);
  const double seq = c.sequence_parallel && x.T > 1 ? T : 1;  // the residual stream's split
  const double kv = double(m.kv_heads * m.head_dim()), F = double(m.ffn_hidden);
  const double layer = c.recompute == Recompute::full ? h / seq : 2 * h / seq + (2 * h + kv + F) / T;
  const double logits = x.P == 1 ? rows * double(m.padded_vocab(x.T)) / T * (x.pb + 4) : 0;
  return rows * layer * first_stage_layers_in_flight(x) * x.pb + logits;
}

}  // namespace

// Model-state bytes per device for the largest pipeline stage (the one
// formula of parallel/data_parallel.hpp) plus what each ZeRO stage adds, the
// activations of the contexts the schedule holds, and the transfer buffers.
void plan_memory(const PlanContext& x, PlanResult& r) {
  const PlanConfig& c = x.c;
  const ModelConfig& m = x.q.model;
  const int T = x.T, P = x.P, V = x.V, CP = x.CP, S = x.S;  // ZeRO shards over S (data x context, or HSDP's)
  const double pb = x.pb;
  const auto& flight = x.schedule.in_flight;
  const double Ps = double(r.stage_params);
  PlanMemory& mem = r.memory;
  // As the trainer allocates (measured by its per-category peaks; docs/planner.md):
  // ZeRO 1 receives its reduced shard into a buffer; ZeRO 2 and 3 accumulate
  // into a whole gradient buffer when there are several micro-batches, else
  // hold a few segment windows while they are reduce-scattered; ZeRO 3
  // gathers parameters a segment at a time, the next one prefetched.
  const double segment = double(x.sizes.segment);  // the largest gathered unit, on one tensor rank
  // the dense part sharded over its shard group (data x context without HSDP), this rank's experts over theirs
  const parallel::ZeroStateBytes dense = parallel::zero_state_bytes(int(c.zero), x.dense_params, S, pb);
  const parallel::ZeroStateBytes experts = parallel::zero_state_bytes(int(c.zero), x.expert_params, x.ES, pb);
  mem.params = dense.params + experts.params + (c.zero >= 3 && S > 1 ? 2 * pb * segment : 0);
  // ZeRO 2/3 gradients beyond the shard: with accumulation (several
  // micro-batches) a whole accumulation buffer (Trident's trainer), unless the
  // software reduce-scatters every micro-batch into the shard
  // (`zero_grad_accumulation: shard`); otherwise the windows in flight (two
  // reducing, one being written)
  const bool whole = r.micro_batches > 1 && !x.cl.sharded_grad_accumulation &&
                     x.q.parallel.zero_accumulate != ZeroAccumulate::shard;  // Trident's parallel.zero_accumulate
  const double windows = whole ? 4 * Ps : 3 * 4 * segment;
  mem.grads = dense.grads + experts.grads + (c.zero >= 2 && S > 1 ? windows : 0);
  mem.optimizer = dense.optimizer + experts.optimizer;
  // Muon: its matrices keep the momentum alone (4 bytes, not AdamW's 8): the model's share of them, f
  if (x.q.optim.name == OptimizerKind::muon) {
    const double f = double(muon_elements(m)) / double(model::ParamRegistry(m).total());
    mem.optimizer -= 4 * f * (x.dense_params / (c.zero >= 1 ? S : 1) + x.expert_params / (c.zero >= 1 ? x.ES : 1));
  }
  if (c.zero == 1 && S > 1) mem.buffers += 4 * x.dense_params / S;
  if (c.zero == 1 && x.ES > 1) mem.buffers += 4 * x.expert_params / x.ES;
  // Muon: the part-sized buffer its u and update pass through (fp32, kept between steps; docs/optim.md#muon)
  if (x.q.optim.name == OptimizerKind::muon) mem.buffers += 4 * (x.dense_params + x.expert_params);
  const bool paired = pairs_overlap(x);  // each paired pass has its own exchange buffers and MoE scratch
  if (x.EP > 1)  // the exchange's rows in arrival order and the experts' output until it is sent back
    mem.buffers += (paired ? 2 : 1) * 2 * pb * double(c.micro_batch * m.seq_len / CP * m.moe.top_k * m.hidden);
  const model::ActivationShape shape{
      c.micro_batch, T, c.sequence_parallel, c.recompute, parallel::splits_backward(c.schedule), CP, x.EP, paired};
  double act = 0;
  for (int pp = 0; pp < P; ++pp) {
    double a = double(model::scratch_elements(m, shape));
    const auto chunks = model::pipeline_chunks(m, P, V, c.stage_layers, pp, c.schedule);
    for (int v = 0; v < V; ++v) {
      const auto& ch = chunks[size_t(v)];
      const int64_t moe = model::moe_layers_in(m, ch.first_layer, ch.layers);
      // train.fp8.saved_inputs: a byte a kept value, not pb
      const double kept = double(model::fp8_kept_values(m, x.q.train.fp8, shape, ch.first_layer, ch.layers, ch.head));
      a += double(flight[size_t(pp)][size_t(v)]) *
               (double(model::activation_elements(m, shape, ch.layers, ch.head, moe)) - kept * (1 - 1 / pb)) +
           double(model::shared_recompute_elements(
               m, shape, ch.layers, moe + (ch.head ? model::moe_layers_in(m, m.layers, m.mtp.depth) : 0)));
    }
    act = std::max(act, a);
  }
  mem.activations = x.cl.kept == Cluster::Kept::megatron     ? megatron_activation_bytes(x, r)
                    : x.cl.kept == Cluster::Kept::torchtitan ? torchtitan_activation_bytes(x, r)
                                                             : pb * act;
  const double R = double(c.micro_batch * m.seq_len / CP) / (c.sequence_parallel ? T : 1);
  if (P > 1) mem.buffers += 4.0 * V * R * double(m.hidden) * pb;  // send/receive pools
  if (CP > 1) {  // the context transfer buffers, fp32 (parallel/context_parallel.hpp): per rank's rows
    const model::LocalDims local = model::local_dims(m, {0, T});
    const double rows = double(c.micro_batch * m.seq_len / CP), dq = double(m.q_head_dim()),
                 dv = double(m.v_head_dim());  // the query/key and value head sizes (MLA: 192 and 128)
    const double H = double(local.heads), KV = double(local.kv_heads);
    const double kv = rows * KV * (dq + dv), state = rows * H;
    const double qkv = rows * ((H + KV) * dq + KV * dv), out = rows * H * dv;
    mem.buffers += 4 * (c.context_mode == ContextMode::ring ? 5 * kv + state : 4 * qkv + 3 * out + 4 * state);
  }
}

}  // namespace trident::launch
