// The step time of one plan, by category (see plan_parts.hpp and
// docs/planner.md): compute from the step cost model, the bubble from the
// schedule's simulation, collectives by an alpha-beta model per link level.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "launch/plan/plan_parts.hpp"
#include "model/memory.hpp"
#include "model/parallel_plan.hpp"
#include "parallel/topology.hpp"

namespace trident::launch {

namespace {

// Ring collectives over g ranks: time for `bytes` per rank.
double all_reduce_time(double bytes, int g, const Link& l) {
  return g <= 1 ? 0 : 2.0 * (g - 1) / g * bytes / l.bandwidth_at(bytes) + 2.0 * (g - 1) * l.latency;
}
double half_collective_time(double bytes, int g, const Link& l) {  // reduce-scatter or all-gather
  return g <= 1 ? 0 : double(g - 1) / g * bytes / l.bandwidth_at(bytes) + double(g - 1) * l.latency;
}

GroupPlacement place(const parallel::Topology& topo, parallel::GroupKind kind, int devices_per_node) {
  GroupPlacement p;
  const auto groups = topo.groups(kind);
  for (const auto& g : groups)
    for (int r : g)
      if (r / devices_per_node != g.front() / devices_per_node) p.intra = false;
  const auto& first = groups.front();
  p.per_node = int(std::count_if(first.begin(), first.end(),
                                 [&](int r) { return r / devices_per_node == first.front() / devices_per_node; }));
  return p;
}

// The link a group's collectives run over: inside a node the node's fabric;
// across nodes the ring leaves each node through the network interfaces of
// the members there (one per device), up to the node fabric's bandwidth.
Link group_link(const Cluster& cl, const GroupPlacement& p) {
  if (p.intra) return cl.intra;
  Link l = cl.inter;
  l.bandwidth = std::min(cl.intra.bandwidth, cl.inter.bandwidth * p.per_node);
  return l;
}

// Context parallelism's transfers per step (ring or all-to-all) and the
// part the attention of the block in hand hides; `passes`: layer passes of
// the slowest stage (layers x micro-batches).
void context_comm_time(const PlanContext& x, PlanResult& r, double passes) {
  const PlanConfig& c = x.c;
  const ModelConfig& m = x.q.model;
  const int T = x.T, CP = x.CP;
  const double pb = x.pb;
  PlanTime& t = r.time;
  // per layer and micro-batch, on this rank's rows (b x s / CP), this tensor rank's heads
  const Link xl = group_link(x.cl, x.where[3]);
  const model::LocalDims local = model::local_dims(m, {0, T});
  // the query/key and value head sizes (MLA: 192 and 128)
  const double rows = double(c.micro_batch * m.seq_len / CP), dq = double(m.q_head_dim()), dv = double(m.v_head_dim());
  const double H = double(local.heads), KV = double(local.kv_heads);
  auto p2p = [&](double bytes) { return bytes / xl.bandwidth_at(bytes) + xl.latency; };
  double attn_f = 0, attn_b = 0;  // this rank's attention, forward and backward
  for (const Op& op : r.ops)
    if (op.kind == OpKind::attention) attn_f += op.forward_s, attn_b += op.backward_s;
  const double again = c.recompute == Recompute::none ? 0 : 1;  // full or selective: the forward's exchange again
  if (c.context_mode == ContextMode::ring) {
    // CP - 1 key/value blocks pass forward, each behind the attention of the block in hand; backward passes them
    // again behind theirs, and the dK/dV partials (as large) CP times, after each block's compute
    const double kv = p2p(rows * KV * (dq + dv) * pb);
    const double fwd = (CP - 1) * kv, bwd = (CP - 1) * kv + CP * kv;
    const double fwd_hidden = (CP - 1) * std::min(kv, attn_f / CP), bwd_hidden = (CP - 1) * std::min(kv, attn_b / CP);
    t.context_comm = passes * ((1 + again) * fwd + bwd);
    t.context_comm_hidden = passes * ((1 + again) * fwd_hidden + bwd_hidden);
  } else {
    // all-to-all of (CP-1)/CP of the buffer: q, k, v and the output forward; backward the output gradient,
    // q, k, v again and dq, dk, dv
    auto a2a = [&](double bytes) { return (CP - 1) * p2p(bytes / CP); };
    const double qkv = a2a(rows * ((H + KV) * dq + KV * dv) * pb), out = a2a(rows * H * dv * pb);
    t.context_comm = passes * ((1 + again) * (qkv + out) + out + 2 * qkv);
  }
}

// Selective recomputation as torchtitan's per-op policy does it (`activations: torchtitan`), not Megatron's.
bool torchtitan_selective(const PlanContext& x) {
  return x.cl.kept == Cluster::Kept::torchtitan && x.c.recompute == Recompute::selective;
}

// The tensor group's collectives per step; `passes`: layer passes of the
// slowest stage (layers x micro-batches). Per layer and micro-batch two
// all-reduces forward and two backward (with sequence parallelism an
// all-gather and a reduce-scatter each: the same volume), two more when full
// recomputation repeats the forward, one more under torchtitan's per-op
// selective policy (the two all-gathers of the norm outputs, or without
// sequence parallelism the attention's all-reduce, are not saved). Software
// that keeps the sequence-parallel norm outputs sharded (`activations:
// megatron`) gathers them again in the backward for the weight gradients: one
// all-reduce's volume more. With `tensor_comm_overlap` (sequence parallelism
// only) each collective is cut into T chunks pipelined with the GEMM it feeds
// or drains: what its GEMMs take is hidden, and at least one chunk of T stays
// exposed; forward and backward apart, the repeated forward's behind the
// repeated GEMMs. `forward` (torchtitan's async tensor parallelism, whose
// compiler pass fuses the forward's all-gather-matmul and matmul-reduce-scatter
// pairs) leaves the backward's exposed.
void tensor_comm_time(const PlanContext& x, PlanResult& r, double passes) {
  const PlanConfig& c = x.c;
  const ModelConfig& m = x.q.model;
  const int T = x.T;
  if (T <= 1) return;
  const Link tl = group_link(x.cl, x.where[kTensor]);
  const double act_bytes = double(c.micro_batch * m.seq_len / x.CP * m.hidden) * x.pb;
  const double ar = all_reduce_time(act_bytes, T, tl);
  const bool regather = x.cl.kept == Cluster::Kept::megatron && c.sequence_parallel;
  const bool per_op = torchtitan_selective(x);
  const double again = c.recompute == Recompute::full ? 1 : per_op ? 0.5 : 0;  // the forward's collectives again
  const double fwd = 2 * ar, bwd = (regather ? 3 : 2) * ar;
  PlanTime& t = r.time;
  t.tensor_comm = passes * ((1 + again) * fwd + bwd);
  if (x.cl.tensor_overlap == Cluster::TensorOverlap::none || !c.sequence_parallel) return;
  double gemm_f = 0, gemm_b = 0, gemm_again = 0;  // one layer's tensor-parallel GEMMs (a dense layer's)
  for (const Op& op : r.ops)
    if (op.kind == OpKind::gemm && !op.head && op.layers != OpLayers::moe)
      gemm_f += op.forward_s, gemm_b += op.backward_s, gemm_again += op.forward_s * (per_op ? op.per_op : 1);
  auto exposed = [&](double comm, double gemm) { return std::max(comm / T, comm - gemm); };
  const double bwd_exposed = x.cl.tensor_overlap == Cluster::TensorOverlap::both ? exposed(bwd, gemm_b) : bwd;
  t.tensor_comm_hidden =
      t.tensor_comm - passes * (exposed(fwd, gemm_f) + exposed(again * fwd, gemm_again) + bwd_exposed);
}

// The time of one part's reductions over its replicas.
struct ReduceTime {
  double comm = 0, hide = 0, replicas = 0;  // all, what the backward can hide, the replicas' share of `comm`
};

// One part's gradient reduction (and ZeRO's parameter gathers) per step
// over its replicas: g ranks sharing ZeRO's shards at placement `where`,
// and under HSDP the R replicas of each shard at `across`, for `params`
// elements of this rank's; returns the time, what the backward can hide of
// it (`busy`: the slowest stage's compute) and the replicas' share.
// fp8_share: the part's parameters ZeRO 3 gathers as FP8 codes (train.fp8.param_gather).
ReduceTime reduce_time(const PlanContext& x, const PlanResult& r, double params, int g, const GroupPlacement& where,
                       int R, const GroupPlacement& across, double busy, double fp8_share = 0) {
  if (g * R <= 1 || params <= 0) return {};
  const PlanConfig& c = x.c;
  const double pb = x.pb, gathered_bytes = params * (fp8_share + pb * (1 - fp8_share));
  const Link dl = group_link(x.cl, where);
  const double grads = x.cl.grad_reduce_bytes * params;  // fp32, or bf16 where the software reduces in bf16
  const double buckets = std::max(1.0, std::ceil(grads / double(x.q.parallel.bucket_bytes)));
  const double M = r.micro_batches;
  // ZeRO 2/3 reduce-scatter every micro-batch's gradients where the software accumulates in the shard
  // (`zero_grad_accumulation: shard`, Trident's parallel.zero_accumulate shard), else once per step from the
  // whole accumulation buffer (Trident's zero_accumulate full)
  const double reductions = x.cl.sharded_grad_accumulation || c.shard_accumulation ? M : 1;
  // ZeRO 0/1: one reduction of the accumulated gradients per step (all-reduce,
  // or reduce-scatter + parameter all-gather), overlapping only the last
  // micro-batch's backward. ZeRO 2: `reductions` reduce-scatters, behind the
  // backwards. ZeRO 3: also the parameters gathered for every forward and
  // backward, prefetched behind compute. HSDP: each rank's reduced shard
  // (1/g of the gradients) all-reduced over the R replicas once per step,
  // behind the backward as its pieces arrive.
  // With `data_comm_overlap` (Megatron-Core's --overlap-grad-reduce and
  // --overlap-param-gather) ZeRO 1 also gathers the parameters bucket by
  // bucket behind the next step's first forward, and the overlap holds with a
  // pipeline too; the last bucket's reduction stays exposed.
  const bool gather_ahead = x.cl.data_comm_overlap;
  double comm = 0, hide = 0;
  if (c.zero == 0) {
    comm = all_reduce_time(grads, g, dl), hide = busy * 2 / 3 / M;
  } else if (c.zero == 1) {
    const double reduce = half_collective_time(grads, g, dl), gather = half_collective_time(pb * params, g, dl);
    comm = reduce + gather, hide = busy * 2 / 3 / M;
    if (gather_ahead) hide = std::min(std::min(reduce, hide) + std::min(gather, busy / 3 / M), comm - reduce / buckets);
  } else if (c.zero == 2) {
    comm = reductions * half_collective_time(grads, g, dl) + half_collective_time(pb * params, g, dl),
    hide = busy * 2 / 3;
  } else {  // train.fp8.param_gather: the FP8 linears' weights a byte each
    comm = reductions * half_collective_time(grads, g, dl) + M * 2 * half_collective_time(gathered_bytes, g, dl),
    hide = busy;
  }
  comm += (c.zero >= 2 ? reductions : 1) * buckets * 2.0 * (g - 1) * dl.latency;
  double across_s = 0;
  if (R > 1) {
    const Link rl = group_link(x.cl, across);
    across_s = all_reduce_time(grads / g, R, rl) + buckets * 2.0 * (R - 1) * rl.latency;
  }
  return {comm + across_s, hide, across_s};
}

// The gradient reductions per step: the dense part over data x context, this
// rank's experts over expert-data; the part the backward hides.
void data_comm_time(const PlanContext& x, PlanResult& r, double busy) {
  // train.fp8.param_gather: the share of each part's parameters gathered as FP8 codes: the experts' weights;
  // the dense part's all but the embeddings and the head (norms, biases and routers are left in it: a small
  // overcount), of the model's average stage
  double dense_fp8 = 0, experts_fp8 = 0;
  if (x.q.train.fp8.param_gather && x.q.train.fp8.on()) {
    const ModelConfig& m = x.q.model;
    const double whole = double(x.sizes.whole), experts = double(x.expert_params) * x.EP * x.T * x.P;
    const double tables = double(m.padded_vocab(1)) * double(m.hidden) * (m.tie_embeddings ? 1 : 2);
    const double dense = std::max(1.0, whole - experts);
    dense_fp8 = x.q.train.fp8.keeps(Fp8Module::attention) && x.q.train.fp8.keeps(Fp8Module::mlp)
                    ? 0
                    : std::clamp((dense - tables) / dense, 0.0, 1.0);
    experts_fp8 = x.q.train.fp8.keeps(Fp8Module::experts) ? 0 : 1;
  }
  const ReduceTime dense =
      reduce_time(x, r, x.dense_params, x.S, x.where[kDataShard], x.R, x.where[kDataReplicate], busy, dense_fp8);
  const ReduceTime experts = reduce_time(x, r, x.expert_params, x.ES, x.where[kExpertShard], x.ER,
                                         x.where[kExpertReplicate], busy, experts_fp8);
  PlanTime& t = r.time;
  t.data_comm = dense.comm + experts.comm;
  t.replica_comm = dense.replicas + experts.replicas;
  // Trident's trainer overlaps when not piped; `data_comm_overlap` software with a pipeline too
  if ((x.P == 1 && x.V == 1) || x.cl.data_comm_overlap)
    t.data_comm_hidden = std::min(t.data_comm, std::max(dense.hide, experts.hide));
}

// Expert parallelism's token exchange per step: each MoE layer's dispatch
// and combine for every micro-batch, forward and backward (and the forward's
// again when recomputation repeats it), an all-to-all over the expert group
// of every routed row (top_k per token, the full hidden size, on every
// tensor rank: they route the same rows). `passes`: MoE layer passes of the
// slowest stage (MoE layers x micro-batches).
void expert_comm_time(const PlanContext& x, PlanResult& r, double passes) {
  const PlanConfig& c = x.c;
  const ModelConfig& m = x.q.model;
  const int g = x.EP;
  const Link el = group_link(x.cl, x.where[kExpert]);
  const double bytes =
      double(c.micro_batch * m.seq_len / x.CP / (x.whole_experts ? x.T : 1)) * double(m.moe.top_k * m.hidden) * x.pb;
  // (g - 1) / g of the rows leave, in g - 1 pairwise exchanges
  const double a2a = double(g - 1) / g * bytes / el.bandwidth_at(bytes / g) + double(g - 1) * el.latency;
  const double exchanges = 4 + (c.recompute == Recompute::none ? 0 : 2);
  r.time.expert_comm = passes * exchanges * a2a;
  // dualpipev's paired passes (parallel/paired_passes.hpp): the exchanges of the passes inside a pair run
  // under the other pass's compute, up to that compute
  if (pairs_overlap(x))
    r.time.expert_comm_hidden =
        std::min(x.schedule.paired * r.time.expert_comm, x.schedule.paired * (r.time.compute() + r.time.recompute));
}

// Muon (optim/muon.hpp): the stage's matrices (its `share` of the model's)
// are spread over its tensor x shard-group ranks (data x context without
// HSDP), each orthogonalised by one owner, so a rank runs 1 / (T S) of the
// stage's iterations. The exchanges, in fp32: each rank sends the owners in
// its tensor group its slices of its replica's matrices (1 / S of them;
// (T - 1) / T leave) and gets the results back, two all-to-alls over the
// tensor link; over the shard group the part-sized buffer is all-gathered
// (ZeRO >= 1) and summed (reduce-scatter with ZeRO >= 1, else all-reduce),
// each part over its own (the dense part's shard group, the experts').
void muon_time(const PlanContext& x, PlanResult& r, double share) {
  const ModelConfig& m = x.q.model;
  const int T = x.c.tensor;
  PlanTime& t = r.time;
  t.muon_iteration = muon_seconds(m, x.q.optim.muon, x.cl.rates()) * share / double(T * x.S);
  t.optimizer += t.muon_iteration;
  if (T > 1) {
    const Link tl = group_link(x.cl, x.where[kTensor]);
    const double bytes = 4.0 * double(muon_elements(m)) * share / T / x.S * double(T - 1) / T;
    t.optimizer_comm += 2 * (bytes / tl.bandwidth_at(bytes / (T - 1)) + double(T - 1) * tl.latency);
  }
  auto replicas = [&](double elements, int g, const GroupPlacement& where) {
    if (g <= 1 || elements <= 0) return 0.0;
    const Link l = group_link(x.cl, where);
    const double bytes = 4.0 * elements;
    return x.c.zero >= 1 ? 2 * half_collective_time(bytes, g, l) : all_reduce_time(bytes, g, l);
  };
  t.optimizer_comm +=
      replicas(x.dense_params, x.S, x.where[kDataShard]) + replicas(x.expert_params, x.ES, x.where[kExpertShard]);
}

}  // namespace

bool pairs_overlap(const PlanContext& x) {
  return x.c.schedule == ScheduleKind::dualpipev && x.q.parallel.overlap_paired && x.q.model.moe.enabled && x.EP > 1;
}

MeshPlacement place_groups(int D, int T, int P, int CP, int EP, const std::vector<MeshAxis>& order,
                           int devices_per_node, bool whole_experts, int data_shard) {
  const parallel::Topology topo(D, P, T, order, CP, EP, whole_experts, data_shard);
  MeshPlacement out;
  using K = parallel::GroupKind;
  for (auto [at, kind] : {std::pair{kTensor, K::tensor},
                          {kDataContext, K::data_context},
                          {kPipeline, K::pipeline},
                          {kContext, K::context},
                          {kExpert, K::expert},
                          {kExpertData, K::expert_data}})
    out[size_t(at)] = place(topo, kind, devices_per_node);
  if (topo.data_replicate() > 1)  // HSDP's groups; without it the shard groups are the whole groups
    for (auto [at, kind] : {std::pair{kDataShard, K::data_shard},
                            {kDataReplicate, K::data_replicate},
                            {kExpertShard, K::expert_shard},
                            {kExpertReplicate, K::expert_replicate}})
      out[size_t(at)] = place(topo, kind, devices_per_node);
  else
    out[kDataShard] = out[kDataContext], out[kExpertShard] = out[kExpertData];
  return out;
}

// Seconds per step on the slowest pipeline stage, by category.
void plan_time(const PlanContext& x, PlanResult& r) {
  const Recipe& q = x.q;
  const Cluster& cl = x.cl;
  const PlanConfig& c = x.c;
  const ModelConfig& m = q.model;
  const int T = x.T, P = x.P, V = x.V, CP = x.CP, DC = x.DC;
  const double pb = x.pb;
  const MeshPlacement& where = x.where;
  r.tensor_intra_node = where[0].intra;
  r.data_intra_node = where[kDataShard].intra;
  r.replica_intra_node = where[kDataReplicate].intra;
  r.pipeline_intra_node = where[2].intra;
  r.context_intra_node = where[3].intra;
  r.expert_intra_node = where[kExpert].intra;
  PlanTime& t = r.time;
  // the operations of a layer and the head for one micro-batch; each
  // pipeline rank runs its chunks' layers (and the head on the last chunk's
  // rank) for every micro-batch; the slowest rank sets the pace
  r.ops = layer_ops(m, {c.micro_batch, T, c.sequence_parallel, CP, x.EP, x.whole_experts}, cl.rates());
  const double mbs = r.micro_batches;
  double slowest = -1, most_layers = 0, most_moe = 0;
  for (int pp = 0; pp < P; ++pp) {
    double layers = 0, moe = 0;
    bool head = false;
    for (const auto& ch : model::pipeline_chunks(m, P, V, c.stage_layers, pp, c.schedule))
      layers += double(ch.layers), head |= ch.head, moe += double(model::moe_layers_in(m, ch.first_layer, ch.layers));
    if (head)  // multi-token prediction: a block and the LM head again per depth (eh_proj's [C, 2C] left out)
      layers += double(m.mtp.depth), moe += double(model::moe_layers_in(m, m.layers, m.mtp.depth));
    most_layers = std::max(most_layers, layers), most_moe = std::max(most_moe, moe);
    const OpTimes ot = stage_op_times(r.ops, layers - moe, moe, head ? double(1 + m.mtp.depth) : 0.0);
    const double again = c.recompute == Recompute::full        ? ot.forward
                         : torchtitan_selective(x)             ? ot.per_op
                         : c.recompute == Recompute::selective ? ot.selective
                                                               : 0;
    if (ot.total() + again <= slowest) continue;
    slowest = ot.total() + again;
    t.gemm = mbs * ot.gemm, t.attention = mbs * ot.attention, t.memory = mbs * ot.memory, t.recompute = mbs * again;
  }
  const double busy = t.compute() + t.recompute;
  t.bubble = r.bubble_fraction < 1 ? busy * r.bubble_fraction / (1 - r.bubble_fraction) : 0;
  tensor_comm_time(x, r, most_layers * mbs);
  if (P > 1) {
    const Link pl = group_link(cl, where[2]);
    const double bytes = double(c.micro_batch * m.seq_len / CP * m.hidden) * pb / (c.sequence_parallel ? T : 1);
    const double one = bytes / pl.bandwidth_at(bytes) + pl.latency;
    t.pipeline_comm = 2.0 * mbs * V * one;
    // Megatron-Core's --overlap-p2p-communication (on by default with the interleaved schedule): each transfer
    // is waited for only when its chunk runs, behind another chunk's compute; the first receive and the last
    // send of the step stay exposed
    if (cl.pipeline_comm_overlap && V > 1) t.pipeline_comm_hidden = std::max(0.0, t.pipeline_comm - 2 * one);
  }
  if (CP > 1) context_comm_time(x, r, most_layers * mbs);
  if (DC > 1 || x.EDC > 1) data_comm_time(x, r, busy);
  if (x.EP > 1) expert_comm_time(x, r, most_moe * mbs);
  // the optimizer step: memory-bound over this rank's shards (all of each part with ZeRO 0)
  const double shards = x.dense_params / (c.zero >= 1 ? x.S : 1) + x.expert_params / (c.zero >= 1 ? x.ES : 1);
  t.optimizer = optimizer_bytes_per_element(cl.precision) * shards / (cl.memory_bandwidth * cl.memory_fraction);
  if (q.optim.name == OptimizerKind::muon) muon_time(x, r, most_layers / double(m.layers + m.mtp.depth));
}

}  // namespace trident::launch
